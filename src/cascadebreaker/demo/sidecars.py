"""Sidecar configs for the demo's `sidecar` mode, generated from the topology."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cascadebreaker.demo.topology import HOST, Topology, breaker_policy


def sidecar_config(topology: Topology, name: str, start_traces: bool = False) -> dict[str, Any]:
    """The `ccb sidecar --config` document for service `name` (schema of issue 3)."""
    spec = topology.service(name)
    if spec.sidecar is None:
        raise ValueError(f"{name} has no sidecar in mode {topology.mode}")
    t = topology.timings
    ports = spec.sidecar
    return {
        "service": spec.service,
        "app": spec.app_url,
        "listen": {
            "outbound": f"{HOST}:{ports.outbound}",
            "inbound": f"{HOST}:{ports.inbound}",
            "grpc": f"{HOST}:{ports.grpc}",
            "admin": f"{HOST}:{ports.admin}",
        },
        "store": "memory",
        "log_level": "warning",
        # The replica's own name in its updates: dependents count the replicas apart. Evidence
        # of survival must be in before a breaker opens on the failures that are that evidence,
        # and it counts when an order answers: the optionality threshold stays well below the
        # breakers' failure threshold, so the orders still in flight when it trips are spare.
        "cascade": {
            "instance": name,
            "optionality": {"threshold": max(1, t.failure_threshold - 2)},
            # For an entry whose clients send no trace context (a browser): the sidecar
            # begins the trace, the app passes it on.
            "start_traces": start_traces,
        },
        "upstreams": {
            upstream: {
                # A peer with a sidecar is reached through its inbound listener (mesh shape);
                # every replica of it is listed, the sidecar picks (round robin).
                **_addresses([r.ingress_url for r in topology.replicas(upstream)]),
                "timeout": topology.call_timeout(upstream),
                "breaker": {
                    **breaker_policy(t),
                    "recovery_timeout": t.recovery_timeout,
                    "half_open_max_calls": t.half_open_max_calls,
                },
            }
            for upstream in spec.calls
        },
    }


def _addresses(urls: list[str]) -> dict[str, Any]:
    return {"url": urls[0]} if len(urls) == 1 else {"urls": urls}


def write_sidecar_config(
    topology: Topology, name: str, directory: Path, start_traces: bool = False
) -> Path:
    """Write the sidecar config of `name` into `directory` and return its path."""
    document = sidecar_config(topology, name, start_traces)
    path = directory / f"{name}-sidecar.yaml"
    try:
        import yaml
    except ModuleNotFoundError:  # JSON is valid YAML: the sidecar reads it either way
        path.write_text(json.dumps(document, indent=2))
    else:
        path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path
