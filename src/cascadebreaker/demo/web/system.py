"""The web demo's processes: the settlement API and the page, on the saga demo's launcher."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from cascadebreaker.demo.launcher import DemoSystem, ManagedProcess
from cascadebreaker.demo.topology import (
    Mode,
    ServiceSpec,
    SidecarPorts,
    Timings,
    Topology,
    free_port,
)

PAGE_PATH = "/reports/settlements"


def web_topology(timings: Timings, port: int | None = None, sidecars: bool = False) -> Topology:
    """The settlement API on a free port and the page on `port` (free when None).

    The page reaches the API through `Topology.upstream_base_url("web", "settlement-api")`, so
    giving the page's spec a sidecar (`sidecars`) routes its calls through that sidecar; the
    page is then served through the sidecar's inbound listener, on `port`.
    """
    taken: set[int] = {port} if port is not None else set()

    def fresh() -> int:
        while (candidate := free_port()) in taken:
            pass
        taken.add(candidate)
        return candidate

    api_port = fresh()
    sidecar = None
    if sidecars:
        inbound = port if port is not None else fresh()
        sidecar = SidecarPorts(fresh(), inbound, fresh(), fresh())
        web_port = fresh()
    else:
        web_port = port if port is not None else fresh()
    services = {
        "settlement-api": ServiceSpec("settlement-api", api_port),
        "web": ServiceSpec("web", web_port, ("settlement-api",), sidecar),
    }
    mode = Mode.SIDECAR if sidecars else Mode.PLAIN
    return Topology(mode, services, timings, precheck=False, entry="web")


@dataclass
class WebDemoSystem(DemoSystem):
    """The running web demo. `port` pins the page's port; everything else takes free ports."""

    port: int | None = None
    sidecars: bool = False

    @classmethod
    def create_web(
        cls, timings: Timings, port: int | None = None, sidecars: bool = False
    ) -> WebDemoSystem:
        """A web demo with allocated ports (not started yet); `sidecars`: the page behind a
        sidecar (its breaker and the cascade there)."""
        return cls(web_topology(timings, port, sidecars), port=port, sidecars=sidecars)

    @property
    def page_url(self) -> str:
        """The settlement report's address."""
        return self.topology.public_url + PAGE_PATH

    def reallocate(self) -> Topology:
        """Fresh ports for everything but a pinned page port."""
        return web_topology(self.topology.timings, self.port, self.sidecars)

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
        processes = {"settlement-api": self.service_process("settlement-api"), "web": page}
        if self.sidecars:  # browsers send no trace context: the sidecar begins each trace
            processes["web-sidecar"] = self.sidecar_process("web", start_traces=True)
        return processes
