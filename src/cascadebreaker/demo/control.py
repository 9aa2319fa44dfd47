"""Talk to a running demo: its state file, fault injection, fault clearing."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from cascadebreaker.demo.topology import EXTERNAL, Topology

FAULT_MODES = ("down", "slow", "errors")


class DemoNotRunning(RuntimeError):
    """No running demo was found (no state file, or its launcher is gone)."""


def state_path() -> Path:
    """Where a running demo writes its addresses (`CCB_DEMO_STATE` overrides)."""
    override = os.environ.get("CCB_DEMO_STATE")
    if override:
        return Path(override)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_dir():
        return Path(runtime) / "ccb-demo.json"
    return Path(tempfile.gettempdir()) / f"ccb-demo-{os.getuid()}.json"


@dataclass(frozen=True)
class DemoState:
    """What the state file says about a running demo."""

    topology: Topology
    launcher_pid: int
    pids: dict[str, int]
    workdir: str


class DemoAlreadyRunning(RuntimeError):
    """Another live demo owns the state file (two demos would hide each other from `ccb fault`)."""


def claim_state() -> Path:
    """The state file, if no other live demo has written it; else DemoAlreadyRunning."""
    from cascadebreaker.demo.launcher import pid_alive

    path = state_path()
    try:
        owner = int(json.loads(path.read_text()).get("launcher_pid", 0))
    except (OSError, ValueError, TypeError, AttributeError):
        return path
    if owner and owner != os.getpid() and pid_alive(owner):
        raise DemoAlreadyRunning(
            f"another demo (pid {owner}) is running and owns {path}; stop it, "
            "or give this one its own state file with CCB_DEMO_STATE"
        )
    return path


def write_state(topology: Topology, pids: dict[str, int], workdir: Path) -> Path:
    """Record the running demo (atomically, readable by the same user only)."""
    path = claim_state()
    document = {
        "launcher_pid": os.getpid(),
        "public_url": topology.public_url,
        "workdir": str(workdir),
        "pids": pids,
        "topology": topology.to_json(),
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(document, indent=2))
    tmp.chmod(0o600)
    tmp.replace(path)
    return path


def remove_state() -> None:
    """Remove the state file if this process wrote it."""
    path = state_path()
    try:
        if json.loads(path.read_text()).get("launcher_pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


def read_state() -> DemoState:
    """The running demo, or DemoNotRunning."""
    from cascadebreaker.demo.launcher import pid_alive

    path = state_path()
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise DemoNotRunning(
            f"no running demo ({path} not found); start `ccb demo --keep-running`"
        ) from None
    except ValueError as exc:
        raise DemoNotRunning(f"unreadable demo state file {path}: {exc}") from exc
    if not pid_alive(int(document["launcher_pid"])):
        raise DemoNotRunning(f"the demo recorded in {path} is no longer running")
    return DemoState(
        Topology.from_json(document["topology"]),
        int(document["launcher_pid"]),
        {k: int(v) for k, v in document.get("pids", {}).items()},
        str(document.get("workdir", "")),
    )


def parse_fault(spec: str) -> dict[str, Any]:
    """`down`, `slow`, `slow=3.0` (delay, s) or `errors=0.5` (rate) -> a `/_fault` body."""
    mode, _, value = spec.partition("=")
    if mode not in FAULT_MODES:
        raise ValueError(f"unknown fault mode {mode!r}; expected one of {', '.join(FAULT_MODES)}")
    body: dict[str, Any] = {"mode": mode}
    if value:
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"fault value must be a number, got {value!r}") from None
        if mode == "slow":
            body["delay"] = number
        elif 0.0 <= number <= 1.0:
            body["rate"] = number
        else:
            raise ValueError(f"fault rate must be within 0..1, got {number}")
    return body


def fault_url(topology: Topology, service: str) -> str:
    """The `/_fault` switch of an external upstream (ValueError for other services)."""
    if service not in EXTERNAL:
        raise ValueError(f"faults apply to external upstreams: {', '.join(sorted(EXTERNAL))}")
    if service not in topology.services:
        raise ValueError(
            f"the running demo has no {service}; its upstreams are: {', '.join(topology.external)}"
        )
    return topology.service(service).app_url + "/_fault"


def inject_fault(topology: Topology, service: str, body: dict[str, Any]) -> dict[str, Any]:
    """Switch a fault on in an external upstream; returns the fault it reports."""
    url = fault_url(topology, service)
    with httpx.Client(trust_env=False, timeout=5.0) as client:
        response = client.post(url, json=body)
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result


def clear_faults(topology: Topology, service: str | None = None) -> list[str]:
    """Clear the fault of one external upstream, or of all; returns the ones cleared."""
    names = [service] if service else topology.external
    with httpx.Client(trust_env=False, timeout=5.0) as client:
        for name in names:
            client.delete(fault_url(topology, name)).raise_for_status()
    return names
