"""Pods on one machine: network namespaces joined to a bridge inside a private "node" namespace.

    root namespace            node namespace "<prefix>-node"          pod namespaces
    blackhole <range>/24      br0 ── v<n> ═══ veth ═══ eth0 <range>.N/24  "<prefix>-<pod>"

Safety (the machine is shared): every address of the pod range lives only inside namespaces made
here; while a lab is up the root namespace has a blackhole route for the range, so nothing sent
from it can leave the machine; clients run inside pod namespaces (`ip netns exec`); `close()` kills
every process in the lab's namespaces, deletes them and the route, also after a failure. A state
file per lab lets `sweep_leftovers()` remove what a killed run left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "ccbpod"
STATE_DIR = Path("/run/ccbpod")


class LabError(RuntimeError):
    """A namespace command failed; the message holds the command and its stderr."""


def run(argv: Sequence[str], check: bool = True, timeout: float = 30) -> str:
    """Run a command, return its stdout; LabError with stderr when it fails (and check)."""
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise LabError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def missing_tools() -> list[str]:
    """What a lab needs and this machine lacks (root included)."""
    missing = [t for t in ("ip", "tc", "iptables", "setpriv") if shutil.which(t) is None]
    if os.geteuid() != 0:
        missing.append("root")
    return missing


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _delete_namespace(name: str) -> None:
    for pid in run(["ip", "netns", "pids", name], check=False).split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    run(["ip", "netns", "delete", name], check=False)


def sweep_leftovers() -> list[str]:
    """Remove labs whose creating process is gone (a killed run); returns their prefixes."""
    swept = []
    if not STATE_DIR.is_dir():
        return swept
    for state_file in STATE_DIR.glob(f"{PREFIX}-*.json"):
        try:
            state = json.loads(state_file.read_text())
        except (OSError, ValueError):
            continue
        if _pid_alive(int(state["pid"])):
            continue
        for name in state["namespaces"]:
            _delete_namespace(name)
        run(["ip", "route", "del", "blackhole", state["range"]], check=False)
        state_file.unlink(missing_ok=True)
        swept.append(state["prefix"])
    return swept


@dataclass
class Pod:
    """One pod: its namespace, address and the veth end in the node namespace."""

    name: str
    netns: str
    address: str
    node_link: str

    def exec_argv(self, argv: Sequence[str], uid: int | None = None) -> list[str]:
        """`argv` run inside this pod's namespace (as `uid` when given)."""
        prefix = ["ip", "netns", "exec", self.netns]
        if uid is not None:
            prefix += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
        return [*prefix, *argv]


@dataclass
class Lab:
    """A node namespace with a bridge and pods attached to it."""

    prefix: str = field(default_factory=lambda: f"{PREFIX}-{os.getpid()}-{secrets.token_hex(3)}")
    pods: dict[str, Pod] = field(default_factory=dict)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    subnet: str = ""
    _namespaces: list[str] = field(default_factory=list)
    _netem: bool | None = None
    _loss_rules: dict[str, list[str]] = field(default_factory=dict)

    @property
    def node(self) -> str:
        """The node namespace's name."""
        return f"{self.prefix}-node"

    def _save(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        state = {
            "prefix": self.prefix,
            "pid": os.getpid(),
            "range": self.subnet,
            "namespaces": self._namespaces,
        }
        (STATE_DIR / f"{self.prefix}.json").write_text(json.dumps(state))

    def _pick_subnet(self) -> str:
        routes = run(["ip", "route", "show", "table", "all"])
        for _ in range(50):
            candidate = f"10.{random.randint(200, 250)}.{random.randint(0, 255)}"
            if f"{candidate}." not in routes:
                return candidate
        raise LabError("no free 10.x.y.0/24 range for the pods")

    def start(self) -> Lab:
        """Blackhole the range in the root namespace, create the node namespace and bridge."""
        base = self._pick_subnet()
        self.subnet = f"{base}.0/24"
        self._save()  # before anything exists, so a kill at any point can be swept
        run(["ip", "route", "add", "blackhole", self.subnet])
        self._add_namespace(self.node)
        self.node_exec(["ip", "link", "set", "lo", "up"])
        self.node_exec(["ip", "link", "add", "br0", "type", "bridge"])
        self.node_exec(["ip", "link", "set", "br0", "up"])
        return self

    def _add_namespace(self, name: str) -> None:
        self._namespaces.append(name)
        self._save()
        run(["ip", "netns", "add", name])

    def node_exec(self, argv: Sequence[str], check: bool = True) -> str:
        """Run a command in the node namespace."""
        return run(["ip", "netns", "exec", self.node, *argv], check=check)

    def add_pod(self, name: str) -> Pod:
        """A pod namespace with eth0 on the bridge and the next address of the range."""
        index = len(self.pods) + 2
        base = self.subnet.rsplit(".", 1)[0]
        pod = Pod(name, f"{self.prefix}-{name}", f"{base}.{index}", f"v{index}")
        self._add_namespace(pod.netns)
        # The veth pair is born in the node namespace: nothing of it ever exists in the root one.
        self.node_exec(
            [
                "ip",
                "link",
                "add",
                pod.node_link,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                pod.netns,
            ]
        )
        self.node_exec(["ip", "link", "set", pod.node_link, "master", "br0", "up"])
        self.pod_exec(pod, ["ip", "link", "set", "lo", "up"])
        self.pod_exec(pod, ["ip", "addr", "add", f"{pod.address}/24", "dev", "eth0"])
        self.pod_exec(pod, ["ip", "link", "set", "eth0", "up"])
        self.pods[name] = pod
        return pod

    def pod_exec(
        self, pod: Pod, argv: Sequence[str], check: bool = True, timeout: float = 30
    ) -> str:
        """Run a command inside a pod and return its stdout."""
        return run(pod.exec_argv(argv), check=check, timeout=timeout)

    def spawn(
        self,
        pod: Pod,
        argv: Sequence[str],
        uid: int | None = None,
        log: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start a long-running process inside a pod; `close()` kills it."""
        out = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115
        proc = subprocess.Popen(
            pod.exec_argv(argv, uid),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        self.processes.append(proc)
        return proc

    def cut_link(self, pod: Pod, up: bool = False) -> None:
        """Take a pod's link on the bridge down (or back up)."""
        self.node_exec(["ip", "link", "set", pod.node_link, "up" if up else "down"])

    def netem_available(self) -> bool:
        """Whether this kernel has sch_netem (some VM kernels ship without it)."""
        if self._netem is None:
            probe = ["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"]
            self._netem = run(["ip", "netns", "exec", self.node, *probe], check=False) == "" and (
                "netem" in self.node_exec(["tc", "qdisc", "show", "dev", "lo"])
            )
            self.node_exec(["tc", "qdisc", "del", "dev", "lo", "root"], check=False)
        return self._netem

    def delay(self, pod: Pod, ms: int) -> str:
        """Slow the traffic towards a pod; returns how ("netem" or "tbf")."""
        if self.netem_available():
            self.node_exec(
                [
                    "tc",
                    "qdisc",
                    "replace",
                    "dev",
                    pod.node_link,
                    "root",
                    "netem",
                    "delay",
                    f"{ms}ms",
                ]
            )
            return "netem"
        # Without netem: a link so slow that a request's bytes take about `ms` to get through.
        self.node_exec(
            [
                "tc",
                "qdisc",
                "replace",
                "dev",
                pod.node_link,
                "root",
                "tbf",
                "rate",
                "2kbit",
                "burst",
                "1600",
                "latency",
                "60s",
            ]
        )
        return "tbf"

    def loss(self, pod: Pod, percent: int) -> str:
        """Drop `percent` of the packets towards a pod; returns how ("netem" or "iptables")."""
        if self.netem_available():
            self.node_exec(
                [
                    "tc",
                    "qdisc",
                    "replace",
                    "dev",
                    pod.node_link,
                    "root",
                    "netem",
                    "loss",
                    f"{percent}%",
                ]
            )
            return "netem"
        # Without netem: the same random drop, by iptables in the pod's own namespace.
        rule = [
            "-m",
            "statistic",
            "--mode",
            "random",
            "--probability",
            f"{percent / 100:.4f}",
            "-j",
            "DROP",
        ]
        self.pod_exec(pod, ["iptables", "-I", "INPUT", *rule])
        self._loss_rules[pod.name] = rule
        return "iptables"

    def heal(self, pod: Pod) -> None:
        """Undo delay and loss on a pod's link."""
        self.node_exec(["tc", "qdisc", "del", "dev", pod.node_link, "root"], check=False)
        rule = self._loss_rules.pop(pod.name, None)
        if rule is not None:
            self.pod_exec(pod, ["iptables", "-D", "INPUT", *rule], check=False)

    def close(self) -> None:
        """Kill every process of the lab, delete its namespaces and the blackhole route."""
        for proc in self.processes:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for proc in self.processes:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for name in reversed(self._namespaces):
            _delete_namespace(name)
        if self.subnet:
            run(["ip", "route", "del", "blackhole", self.subnet], check=False)
        (STATE_DIR / f"{self.prefix}.json").unlink(missing_ok=True)
