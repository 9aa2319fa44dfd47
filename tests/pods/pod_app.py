"""An unmodified app in a pod: a demo service that calls its upstreams at their pod addresses.

    python pod_app.py SPEC.json SERVICE

No sidecar-aware config at all (the demo's `direct` mode): the app dials
http://<upstream pod>:8080/... itself; in a pod with interception on, the kernel hands those
connections to the sidecar's transparent listener.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn

from cascadebreaker.demo.services import create_app
from cascadebreaker.demo.services.common import ServiceContext
from cascadebreaker.demo.topology import CALLS, START_ORDER, Mode, ServiceSpec, Timings, Topology


@dataclass(frozen=True)
class PodTopology(Topology):
    """The demo topology with every upstream at its pod's address."""

    addresses: dict[str, str] = field(default_factory=dict)
    service_port: int = 8080

    def upstream_base_urls(self, caller: str, upstream: str) -> list[str]:
        """What an app without a sidecar would be configured with: the upstream's address."""
        if upstream not in self.service(caller).calls:
            raise KeyError(f"{caller} does not call {upstream}")
        return [f"http://{self.addresses[upstream]}:{self.service_port}"]


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    name = sys.argv[2]
    services = {s: ServiceSpec(s, spec["app_port"], CALLS[s]) for s in START_ORDER}
    topology = PodTopology(
        Mode.DIRECT, services, Timings(**spec["timings"]), addresses=spec["addresses"]
    )
    host, port = spec["bind"][name]
    app = create_app(ServiceContext(name, topology))
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
