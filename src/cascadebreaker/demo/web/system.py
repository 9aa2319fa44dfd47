"""The web demo's processes: the settlement API and the page, on the saga demo's launcher."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from cascadebreaker.demo.launcher import DemoSystem, ManagedProcess
from cascadebreaker.demo.topology import Mode, ServiceSpec, Timings, Topology, free_port

PAGE_PATH = "/reports/settlements"


def web_topology(timings: Timings, port: int | None = None) -> Topology:
    """The settlement API on a free port and the page on `port` (free when None).

    The page reaches the API through `Topology.upstream_base_url("web", "settlement-api")`, so
    giving the page's spec a sidecar routes its calls through that sidecar.
    """
    api_port = free_port()
    web_port = port if port is not None else free_port()
    while api_port == web_port:
        api_port = free_port()
    services = {
        "settlement-api": ServiceSpec("settlement-api", api_port),
        "web": ServiceSpec("web", web_port, ("settlement-api",)),
    }
    return Topology(Mode.PLAIN, services, timings, precheck=False, entry="web")


@dataclass
class WebDemoSystem(DemoSystem):
    """The running web demo. `port` pins the page's port; everything else takes free ports."""

    port: int | None = None

    @classmethod
    def create_web(cls, timings: Timings, port: int | None = None) -> WebDemoSystem:
        """A web demo with allocated ports (not started yet)."""
        return cls(web_topology(timings, port), port=port)

    @property
    def page_url(self) -> str:
        """The settlement report's address."""
        return self.topology.public_url + PAGE_PATH

    def reallocate(self) -> Topology:
        """Fresh ports for everything but a pinned page port."""
        return web_topology(self.topology.timings, self.port)

    def build_processes(self) -> dict[str, ManagedProcess]:
        """The settlement API first (the page's upstream), then the page."""
        web = self.topology.service("web")
        page = ManagedProcess(
            "web",
            [
                sys.executable,
                "-m",
                "cascadebreaker.demo.web.serve",
                "--topology",
                str(self.topology_path),
            ],
            f"{web.app_url}/healthz",
            self.workdir / "web.log",
        )
        return {"settlement-api": self.service_process("settlement-api"), "web": page}
