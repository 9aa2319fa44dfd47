"""`ccb demo web` as a user runs it: a real process with its own state file, and `ccb fault`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from cascadebreaker.demo.topology import free_port


class WebDemoProcess:
    """A running `ccb demo web` (settlement API + page), its state file and its log."""

    def __init__(self, workdir: Path, *flags: str, start_timeout: float = 90.0) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.state = workdir / "state.json"
        self.log_path = workdir / "ccb-demo-web.log"
        self.port = free_port()
        self.env = {
            **os.environ,
            "CCB_DEMO_STATE": str(self.state),
            "PYTHONPATH": os.pathsep.join(sys.path),
        }
        argv = [sys.executable, "-m", "cascadebreaker.cli", "demo", "web", "--port", str(self.port)]
        with self.log_path.open("w") as log:
            self.process = subprocess.Popen(
                [*argv, *flags],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.url = f"http://127.0.0.1:{self.port}/reports/settlements"
        self.http = httpx.Client(trust_env=False, timeout=30.0)
        self._wait_ready(start_timeout)
        recorded = json.loads(self.state.read_text())
        self.recorded: dict[str, Any] = recorded
        api_port = recorded["topology"]["services"]["settlement-api"]["port"]
        self.api_url = f"http://127.0.0.1:{api_port}"

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"ccb demo web exited:\n{self.output()}")
            if self.state.exists():
                try:
                    if self.http.get(self.url).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"ccb demo web not ready after {timeout:.0f}s:\n{self.output()}")
            time.sleep(0.1)

    def output(self) -> str:
        """What the command printed so far."""
        return self.log_path.read_text(errors="replace")

    def ccb(self, *args: str) -> str:
        """Run `ccb ARGS` against this demo (its state file); returns the output."""
        done = subprocess.run(
            [sys.executable, "-m", "cascadebreaker.cli", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def api_requests(self) -> int:
        """Business requests the settlement API has received."""
        counts = self.http.get(f"{self.api_url}/_stats").json()["counts"]
        return int(counts.get("requests", 0))

    def stop(self) -> None:
        """SIGTERM, as a service manager would; SIGKILL if it does not stop."""
        self.http.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
