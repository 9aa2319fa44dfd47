"""Start and stop the whole demo: one process per service (and per sidecar), no orphans."""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType

import httpx

import cascadebreaker
from cascadebreaker.demo.sidecars import write_sidecar_config
from cascadebreaker.demo.topology import Mode, Timings, Topology

_PR_SET_PDEATHSIG = 1


class LaunchError(RuntimeError):
    """A process of the demo did not come up (the message carries its log's tail)."""


def _die_with_parent() -> None:
    """In the child, before exec: get SIGTERM when the launcher dies, however it dies (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _child_env() -> dict[str, str]:
    """The launcher's environment, with this package importable even when run from a checkout."""
    env = dict(os.environ)
    package_root = str(Path(cascadebreaker.__file__).resolve().parent.parent)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if package_root not in paths:
        env["PYTHONPATH"] = os.pathsep.join([package_root, *paths])
    return env


@dataclass
class ManagedProcess:
    """One child process: a service app or a sidecar, with its health URL and log file."""

    name: str
    argv: list[str]
    health_url: str
    log_path: Path
    env: dict[str, str] = field(default_factory=dict, repr=False)  # extra variables
    popen: subprocess.Popen[bytes] | None = None

    def spawn(self) -> None:
        """Start the process (its output goes to its log file)."""
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                self.argv,
                env={**_child_env(), **self.env},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Own session: a Ctrl-C in the terminal reaches the launcher only, which then
                # stops the children in order.
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )

    @property
    def running(self) -> bool:
        """True while the process is alive."""
        return self.popen is not None and self.popen.poll() is None

    @property
    def pid(self) -> int | None:
        """The process id, once spawned."""
        return None if self.popen is None else self.popen.pid

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the log, for error messages."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def terminate(self) -> None:
        """Ask the process to stop (SIGTERM)."""
        if self.running and self.popen is not None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.terminate()

    def wait_or_kill(self, deadline: float) -> None:
        """Wait until `deadline` (monotonic) for the process to exit, then SIGKILL it."""
        if self.popen is None:
            return
        try:
            self.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout=5)


@dataclass
class DemoSystem:
    """The running demo: its topology and every process. Use as a context manager."""

    topology: Topology
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="ccb-demo-")))
    keep_workdir: bool = False
    secret: str = field(default_factory=lambda: secrets.token_hex(16), repr=False)
    processes: dict[str, ManagedProcess] = field(default_factory=dict)

    @classmethod
    def create(
        cls,
        mode: Mode | str,
        timings: Timings | None = None,
        precheck: bool = True,
        replicas: dict[str, int] | None = None,
    ) -> DemoSystem:
        """A system with freshly allocated ports (not started yet)."""
        return cls(Topology.allocate(mode, timings, precheck, replicas))

    @property
    def topology_path(self) -> Path:
        """Where the service processes read the topology from."""
        return self.workdir / "topology.json"

    def start(self, timeout: float = 60.0, attempts: int = 3) -> None:
        """Start every process (upstreams first) and wait until all answer /healthz.

        Ports are picked free but only bound later by the children; if another process takes
        one meanwhile, the launch is retried on fresh ports.
        """
        for attempt in range(attempts):
            try:
                self._launch(timeout)
                return
            except LaunchError as exc:
                self._stop_processes()
                if "address already in use" not in str(exc).lower() or attempt == attempts - 1:
                    self._remove_workdir()
                    raise
                self.processes.clear()
                self.topology = self.reallocate()
            except BaseException:
                self.stop()
                raise

    def reallocate(self) -> Topology:
        """The same system on fresh ports (after a port was taken before a child bound it)."""
        old = self.topology
        return Topology.allocate(old.mode, old.timings, old.precheck, old.replica_counts)

    def _launch(self, timeout: float) -> None:
        self.topology.save(self.topology_path)
        self.processes.update(self.build_processes())
        for process in self.processes.values():
            process.spawn()
        self._wait_healthy(list(self.processes.values()), timeout)

    def service_process(self, name: str) -> ManagedProcess:
        """The process of one demo service app (`python -m cascadebreaker.demo.serve`)."""
        spec = self.topology.service(name)
        return ManagedProcess(
            name,
            [
                sys.executable,
                "-m",
                "cascadebreaker.demo.serve",
                "--topology",
                str(self.topology_path),
                "--service",
                name,
            ],
            f"{spec.app_url}/healthz",
            self.workdir / f"{name}.log",
        )

    def build_processes(self) -> dict[str, ManagedProcess]:
        """Every process of the saga demo, upstreams first: service apps and their sidecars."""
        processes: dict[str, ManagedProcess] = {}
        for name, spec in self.topology.services.items():  # upstreams first
            processes[name] = self.service_process(name)
            if spec.sidecar is not None and spec.admin_url is not None:
                processes[f"{name}-sidecar"] = self.sidecar_process(name)
        return processes

    def sidecar_process(self, name: str, start_traces: bool = False) -> ManagedProcess:
        """The sidecar of one demo service (its config written into the work directory)."""
        spec = self.topology.service(name)
        assert spec.admin_url is not None, f"{name} has no sidecar"
        config = write_sidecar_config(self.topology, name, self.workdir, start_traces)
        return ManagedProcess(
            f"{name}-sidecar",
            [sys.executable, "-m", "cascadebreaker.cli", "sidecar", "--config", str(config)],
            f"{spec.admin_url}/healthz",
            self.workdir / f"{name}-sidecar.log",
            # One secret per demo run: cascade updates between the sidecars are signed.
            {"CCB_SECRET": self.secret},
        )

    def _wait_healthy(self, processes: list[ManagedProcess], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = list(processes)
        with httpx.Client(trust_env=False, timeout=1.0) as client:
            while pending:
                for process in list(pending):
                    if not process.running:
                        raise LaunchError(f"{process.name} exited:\n{process.log_tail()}")
                    try:
                        if client.get(process.health_url).status_code == 200:
                            pending.remove(process)
                    except httpx.HTTPError:
                        pass
                if pending and time.monotonic() > deadline:
                    names = ", ".join(p.name for p in pending)
                    raise LaunchError(f"not healthy after {timeout:.0f}s: {names}")
                if pending:
                    time.sleep(0.05)

    def stop(self, grace: float = 5.0) -> None:
        """Stop every process: callers first, SIGKILL after `grace` seconds; remove the workdir."""
        self._stop_processes(grace)
        self._remove_workdir()

    def _stop_processes(self, grace: float = 5.0) -> None:
        ordered = list(reversed(self.processes.values()))
        for process in ordered:
            process.terminate()
        deadline = time.monotonic() + grace
        for process in ordered:
            process.wait_or_kill(deadline)

    def _remove_workdir(self) -> None:
        if not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def attach(self, process: ManagedProcess, timeout: float = 30.0) -> None:
        """Start one more process beside the system (stopped with it); wait until healthy."""
        self.processes[process.name] = process
        process.spawn()
        self._wait_healthy([process], timeout)

    def kill(self, name: str) -> None:
        """SIGKILL one process (a real outage, not a simulated one)."""
        process = self.processes[name]
        if process.popen is not None and process.running:
            process.popen.kill()
            process.popen.wait(timeout=5)

    def restart(self, name: str, timeout: float = 30.0) -> None:
        """Start a killed process again on the same ports and wait until it is healthy."""
        process = self.processes[name]
        if process.running:
            return
        process.spawn()
        self._wait_healthy([process], timeout)

    def pids(self) -> dict[str, int]:
        """Process ids of the running processes."""
        return {n: p.pid for n, p in self.processes.items() if p.pid is not None and p.running}

    def __enter__(self) -> DemoSystem:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def sigterm_as_interrupt() -> None:
    """Make SIGTERM behave like Ctrl-C, so the same cleanup path stops the children."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)


def pid_alive(pid: int) -> bool:
    """True if a process with this id exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
