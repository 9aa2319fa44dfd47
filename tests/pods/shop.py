"""The demo's shop in network-namespace pods, every sidecar'd pod intercepting transparently.

Each service is a pod: the unmodified app (tests/pods/pod_app.py) and, for the shop's own
services, a sidecar running as uid 1337 behind `ccb netinit`. Callers reach a pod on
<address>:8080 (its sidecar's inbound listener, or the bare app of a third party); the sidecar's
admin API is on <address>:15000. A client pod drives everything through a pipe (driver.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from cascadebreaker.demo.topology import (
    CALLS,
    EXTERNAL,
    START_ORDER,
    Mode,
    ServiceSpec,
    Timings,
    Topology,
)
from tests.pods.netlab import Lab, Pod

HERE = Path(__file__).resolve().parent
SERVICE_PORT = 8080
APP_PORT = 8000
ADMIN_PORT = 15000
TRANSPARENT_PORT = 15003
PROXY_UID = 1337
SECRET = "pods-test-secret-0123456789abcdef"
# A recovery timeout long enough that an outage is stable while a test looks at it.
TIMINGS = Timings(call_timeout=1.0, failure_threshold=3, recovery_timeout=4.0)


class Driver:
    """The client pod's request loop, spoken to through its stdin/stdout."""

    def __init__(self, lab: Lab, pod: Pod) -> None:
        self.proc = subprocess.Popen(
            pod.exec_argv([sys.executable, str(HERE / "driver.py")]),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        lab.processes.append(self.proc)  # type: ignore[arg-type]

    def call(self, method: str, url: str, body: Any = None, timeout: float = 30) -> dict[str, Any]:
        """One HTTP request from inside the client pod."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        request = {"method": method, "url": url, "json": body, "timeout": timeout}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the driver in the client pod died"
        answer: dict[str, Any] = json.loads(line)
        return answer


def eventually(check: Callable[[], bool], deadline: float = 30, pause: float = 0.2) -> bool:
    """Poll `check` until it holds or `deadline` seconds pass."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(pause)
    return False


class PodShop:
    """The shop's pods on one lab, with interception on in every sidecar'd pod."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.workdir = Path(tempfile.mkdtemp(prefix="ccbpod-shop-"))
        os.chmod(self.workdir, 0o755)  # the sidecars (uid 1337) read their configs here
        self.pods: dict[str, Pod] = {}
        services = {s: ServiceSpec(s, APP_PORT, CALLS[s]) for s in START_ORDER}
        self.topology = Topology(Mode.DIRECT, services, TIMINGS)
        self.client: Driver | None = None

    # -- building ---------------------------------------------------------------------------
    def start(self) -> PodShop:
        """Create every pod, install interception, start apps and sidecars, wait until ready."""
        for name in START_ORDER:
            self.pods[name] = self.lab.add_pod(name)
        client_pod = self.lab.add_pod("client")
        addresses = {name: pod.address for name, pod in self.pods.items()}
        spec = {
            "app_port": APP_PORT,
            "timings": TIMINGS.__dict__,
            "addresses": addresses,
            "bind": {
                name: ["0.0.0.0", SERVICE_PORT] if name in EXTERNAL else ["127.0.0.1", APP_PORT]
                for name in START_ORDER
            },
        }
        spec_file = self.workdir / "spec.json"
        spec_file.write_text(json.dumps(spec))
        for name in START_ORDER:
            pod = self.pods[name]
            if name not in EXTERNAL:
                self._start_sidecar(pod, name)
            self.lab.spawn(
                pod,
                [sys.executable, str(HERE / "pod_app.py"), str(spec_file), name],
                log=self.workdir / f"{name}-app.log",
            )
        self.client = Driver(self.lab, client_pod)
        for name in START_ORDER:
            assert eventually(
                lambda n=name: self.call("GET", n, "/healthz").get("status") == 200, deadline=60
            ), f"{name} did not come up: {self.logs(name)}"
            if name not in EXTERNAL:
                assert eventually(lambda n=name: self.admin(n, "/readyz")["status"] == 200)
        return self

    def _start_sidecar(self, pod: Pod, name: str) -> None:
        config = self.sidecar_config(name)
        path = self.workdir / f"{name}-sidecar.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o644)
        ccb = [sys.executable, "-m", "cascadebreaker.cli"]
        self.lab.pod_exec(
            pod,
            [*ccb, "netinit", "--proxy-port", str(TRANSPARENT_PORT), "--proxy-uid", str(PROXY_UID)],
        )
        env = {**os.environ, "CCB_SECRET": SECRET, "PYTHONUNBUFFERED": "1"}
        self.lab.spawn(
            pod,
            [*ccb, "sidecar", "--config", str(path)],
            uid=PROXY_UID,
            log=self.workdir / f"{name}-sidecar.log",
            env=env,
        )

    def sidecar_config(self, name: str) -> dict[str, Any]:
        """A pod's sidecar config: upstreams by pod address, the transparent listener on."""
        t = self.topology.timings
        return {
            "service": name,
            "app": f"http://127.0.0.1:{APP_PORT}",
            "listen": {
                "outbound": "127.0.0.1:15001",
                "inbound": f"0.0.0.0:{SERVICE_PORT}",
                "grpc": "0.0.0.0:15002",
                "admin": f"0.0.0.0:{ADMIN_PORT}",
                "transparent": f"127.0.0.1:{TRANSPARENT_PORT}",
            },
            "store": "memory",
            "log_level": "warning",
            "cascade": {"advertise": f"{self.pods[name].address}:15002"},
            "upstreams": {
                upstream: {
                    "url": f"http://{self.pods[upstream].address}:{SERVICE_PORT}",
                    "timeout": self.topology.call_timeout(upstream),
                    "connect_timeout": 0.5,
                    "breaker": {
                        "failure_threshold": t.failure_threshold,
                        "recovery_timeout": t.recovery_timeout,
                    },
                }
                for upstream in CALLS[name]
            },
        }

    def logs(self, name: str) -> str:
        """The tail of a pod's logs (for failure messages)."""
        out = []
        for kind in ("app", "sidecar"):
            path = self.workdir / f"{name}-{kind}.log"
            if path.exists():
                out.append(f"[{kind}] " + path.read_text()[-2000:])
        return "\n".join(out)

    def close(self) -> None:
        """Remove the shop's files (the lab kills the processes)."""
        shutil.rmtree(self.workdir, ignore_errors=True)

    # -- talking to it (always from the client pod) -----------------------------------------
    def call(self, method: str, name: str, path: str, body: Any = None) -> dict[str, Any]:
        """A request to a service's pod address (its sidecar's inbound, or the bare app)."""
        assert self.client is not None
        url = f"http://{self.pods[name].address}:{SERVICE_PORT}{path}"
        return self.client.call(method, url, body)

    def admin(self, name: str, path: str) -> dict[str, Any]:
        """A request to a sidecar's admin API."""
        assert self.client is not None
        return self.client.call("GET", f"http://{self.pods[name].address}:{ADMIN_PORT}{path}")

    def order(self) -> int:
        """Place an order at the gateway; its status (0 for a transport error)."""
        return int(self.call("POST", "gateway", "/orders", {"item": "widget"})["status"])

    def count(self, name: str, key: str) -> int:
        """One of an app's work counters."""
        return int(self.call("GET", name, "/_stats")["body"]["counts"].get(key, 0))

    def fault(self, name: str, mode: str) -> None:
        """Switch a third party's fault on."""
        assert self.call("POST", name, "/_fault", {"mode": mode})["status"] == 200

    def clear(self, name: str) -> None:
        """Switch a third party's fault off."""
        assert self.call("DELETE", name, "/_fault")["status"] == 200

    def status(self, name: str) -> dict[str, Any]:
        """A sidecar's /status."""
        answer = self.admin(name, "/status")
        assert answer["status"] == 200, answer
        body: dict[str, Any] = answer["body"]
        return body
