"""The demo's topology in one place: services, their ports on 127.0.0.1, and who calls whom.

A service may run several replicas (`replicas={"shipping": 3}`): the first keeps the service's
name, the others are `shipping.2`, `shipping.3`, each an app with its own sidecar. Callers list
every replica (the sidecar's `urls:`, or round robin in the app without a sidecar).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from cascadebreaker.testing import ports

HOST = "127.0.0.1"


class Mode(StrEnum):
    """How services reach each other."""

    DIRECT = "direct"  # plain HTTP calls, no breaker anywhere
    PLAIN = "plain"  # direct calls wrapped in an in-process CircuitBreaker per downstream
    SIDECAR = "sidecar"  # every call goes through the caller's sidecar (breakers + cascade there)


# Who calls whom: service -> the upstream names it calls. The upstream name is the target service.
CALLS: dict[str, tuple[str, ...]] = {
    "gateway": ("order",),
    # recommendations is a soft dependency: the order service falls back when it fails, and
    # marks nothing (no `ccb-optional`): the cascade must learn that orders survive it.
    "order": ("inventory", "payment", "shipping", "recommendations"),
    "inventory": (),
    "payment": ("payment-gateway",),
    "shipping": ("courier",),
    "payment-gateway": (),
    "courier": (),
    "recommendations": (),
}

# External upstreams: third parties with switchable faults and no sidecar of their own (the
# settlement API is the web demo's, `ccb demo web`).
EXTERNAL = frozenset({"payment-gateway", "courier", "recommendations", "settlement-api"})

# Start order: upstreams first so that callers find them healthy.
START_ORDER = (
    "payment-gateway",
    "courier",
    "recommendations",
    "inventory",
    "payment",
    "shipping",
    "order",
    "gateway",
)


# The failure-rate policy of the demo's breakers (Timings.policy == "failure_rate"): high
# enough that half the calls failing does not open the circuit (retrying such an upstream
# serves more orders than refusing it), low enough that an upstream that is down opens it.
POLICIES = ("consecutive", "failure_rate")
FAILURE_RATE = 0.8
FAILURE_WINDOW = 20


def breaker_policy(timings: Timings) -> dict[str, Any]:
    """The sidecar YAML `breaker:` keys for the timings' policy."""
    if timings.policy == "failure_rate":
        window = {"size": FAILURE_WINDOW}
        rate = {"rate": FAILURE_RATE, "minimum_calls": FAILURE_WINDOW // 2, "window": window}
        return {"failure_rate": rate}
    return {"failure_threshold": timings.failure_threshold}


# Steps a saga orchestrator may have to undo, and how often it tries each compensation.
COMPENSATED: dict[str, tuple[str, ...]] = {"order": ("inventory", "payment")}
COMPENSATION_ATTEMPTS = 3
# A compensation refused by an open breaker waits for the probe only when it is this close.
COMPENSATION_PROBE_WAIT = 0.25


def _budget(service: str) -> int:
    """Call-timeout units a call to `service` may take: its calls in sequence, compensations too."""
    steps = sum(_budget(upstream) for upstream in CALLS.get(service, ()))  # unlisted: a leaf
    undo = sum(_budget(upstream) for upstream in COMPENSATED.get(service, ()))
    return 1 + steps + undo * COMPENSATION_ATTEMPTS


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (below the ephemeral range)."""
    return ports.free_port(HOST)


@dataclass(frozen=True)
class Timings:
    """Timeouts and breaker settings shared by every hop (short ones make tests fast)."""

    call_timeout: float = 2.0  # per downstream call, seconds
    failure_threshold: int = 5
    recovery_timeout: float = 5.0
    half_open_max_calls: int = 1
    # When a breaker opens: `consecutive` failures (failure_threshold in a row), or a
    # `failure_rate` (FAILURE_RATE of the last FAILURE_WINDOW calls, once it holds them).
    policy: str = "consecutive"


@dataclass(frozen=True)
class SidecarPorts:
    """The four listeners of one service's sidecar."""

    outbound: int
    inbound: int
    grpc: int
    admin: int


@dataclass(frozen=True)
class ServiceSpec:
    """One service of the demo as deployed: its name, app port, sidecar and upstreams."""

    name: str  # the replica's name: the service's for the first replica, else `service.N`
    port: int
    calls: tuple[str, ...] = ()
    sidecar: SidecarPorts | None = None
    replica_of: str | None = None  # the service of a second, third... replica

    @property
    def service(self) -> str:
        """The service this process serves (its replicas share it)."""
        return self.replica_of or self.name

    @property
    def external(self) -> bool:
        """True for third-party upstreams (fault switches, no sidecar)."""
        return self.service in EXTERNAL

    @property
    def app_url(self) -> str:
        """The app's own address."""
        return f"http://{HOST}:{self.port}"

    @property
    def ingress_url(self) -> str:
        """Where callers reach this service: its sidecar's inbound listener, else the app."""
        if self.sidecar is not None:
            return f"http://{HOST}:{self.sidecar.inbound}"
        return self.app_url

    @property
    def admin_url(self) -> str | None:
        """The sidecar's admin API, if the service has a sidecar."""
        return None if self.sidecar is None else f"http://{HOST}:{self.sidecar.admin}"


@dataclass(frozen=True)
class Topology:
    """The whole deployed demo: mode, timings and every service with its ports."""

    mode: Mode
    services: dict[str, ServiceSpec]
    timings: Timings = field(default_factory=Timings)
    # Whether the orchestrator asks its sidecar before a saga (sidecar mode only).
    precheck: bool = True
    # The service a user talks to: the saga's gateway, the web demo's page.
    entry: str = "gateway"

    @classmethod
    def allocate(
        cls,
        mode: Mode | str,
        timings: Timings | None = None,
        precheck: bool = True,
        replicas: dict[str, int] | None = None,
    ) -> Topology:
        """Build the topology with free loopback ports for every listener (and replica)."""
        mode = Mode(mode)
        replicas = replicas or {}
        for name, count in replicas.items():
            if name not in CALLS or name in EXTERNAL or name == "gateway" or count < 1:
                raise ValueError(f"replicas: {name}={count} (an internal service, 1 or more)")
        taken: set[int] = set()

        def port() -> int:
            while (candidate := free_port()) in taken:
                pass
            taken.add(candidate)
            return candidate

        services: dict[str, ServiceSpec] = {}
        for name in START_ORDER:
            sidecar = None
            if mode is Mode.SIDECAR and name not in EXTERNAL:
                sidecar = SidecarPorts(port(), port(), port(), port())
            services[name] = ServiceSpec(name, port(), CALLS[name], sidecar)
            for n in range(2, replicas.get(name, 1) + 1):
                more = None if sidecar is None else SidecarPorts(port(), port(), port(), port())
                services[f"{name}.{n}"] = ServiceSpec(
                    f"{name}.{n}", port(), CALLS[name], more, name
                )
        return cls(mode, services, timings or Timings(), precheck)

    def replicas(self, service: str) -> list[ServiceSpec]:
        """Every replica of `service` (one for most)."""
        return [s for s in self.services.values() if s.service == service]

    @property
    def replica_counts(self) -> dict[str, int]:
        """Services with more than one replica, and how many they have."""
        counts: dict[str, int] = {}
        for spec in self.services.values():
            counts[spec.service] = counts.get(spec.service, 0) + 1
        return {name: n for name, n in counts.items() if n > 1}

    def service(self, name: str) -> ServiceSpec:
        """The spec of one service, or KeyError naming it."""
        try:
            return self.services[name]
        except KeyError:
            raise KeyError(f"unknown demo service {name!r}") from None

    @property
    def public_url(self) -> str:
        """The public entry point (the entry service, through its sidecar when it has one)."""
        return self.service(self.entry).ingress_url

    @property
    def external(self) -> list[str]:
        """The external upstreams of this topology (the ones `ccb fault` can switch)."""
        return sorted(name for name, spec in self.services.items() if spec.external)

    def upstream_base_url(self, caller: str, upstream: str) -> str:
        """The base URL `caller` uses to reach `upstream` in this mode (its first replica)."""
        return self.upstream_base_urls(caller, upstream)[0]

    def upstream_base_urls(self, caller: str, upstream: str) -> list[str]:
        """Where `caller` reaches `upstream`: its sidecar (which knows every replica), else
        every replica's app."""
        spec = self.service(caller)
        if upstream not in spec.calls:
            raise KeyError(f"{caller} does not call {upstream}")
        if spec.sidecar is not None:
            return [f"http://{HOST}:{spec.sidecar.outbound}/{upstream}"]
        return [replica.app_url for replica in self.replicas(upstream)]

    def call_timeout(self, upstream: str) -> float:
        """Timeout of a call to `upstream`: long enough for its own calls to time out first.

        A caller that gives up before its upstream's upstream does turns a clean, compensated
        failure into an unknown outcome; so each hop waits for the sequential worst case below it.
        """
        return self.timings.call_timeout * _budget(upstream)

    def to_json(self) -> dict[str, Any]:
        """A JSON-friendly form (what the state file and the service processes read)."""
        return {
            "mode": self.mode.value,
            "timings": asdict(self.timings),
            "precheck": self.precheck,
            "entry": self.entry,
            "services": {n: asdict(s) for n, s in self.services.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Topology:
        """Inverse of to_json."""
        services = {}
        for name, raw in data["services"].items():
            sidecar = SidecarPorts(**raw["sidecar"]) if raw.get("sidecar") else None
            services[name] = ServiceSpec(
                raw["name"], raw["port"], tuple(raw["calls"]), sidecar, raw.get("replica_of")
            )
        return cls(
            Mode(data["mode"]),
            services,
            Timings(**data.get("timings", {})),
            bool(data.get("precheck", True)),
            str(data.get("entry", "gateway")),
        )

    def save(self, path: Path) -> None:
        """Write the topology as JSON."""
        path.write_text(json.dumps(self.to_json(), indent=2))

    @classmethod
    def load(cls, path: Path) -> Topology:
        """Read a topology written by save()."""
        data: dict[str, Any] = json.loads(path.read_text())
        return cls.from_json(data)
