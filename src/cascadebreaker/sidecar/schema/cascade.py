"""The `cascade:` section validated with pydantic (after the rest of the file):

cascade:
  enabled: true              # default; false = no cascade hook at all
  secret: "..."              # else the CCB_SECRET environment variable, else unauthenticated
  learning: true             # learn edges from calls (ccb-serving-endpoint, trace context)
  learn_from_traces: true    # correlate traceparent / b3 / x-request-id
  start_traces: false        # add a traceparent to inbound requests that carry none (for
                             #   apps that pass it on but never start one)
  edge_ttl: 600              # seconds an unseen learned edge lives
  namespace: ccb             # Redis channel `ccb:cascade:<namespace>` (store: redis://)
  redis: redis://...         # default: `store` when it is a Redis URL
  nats: nats://127.0.0.1:4222  # also carry updates over NATS (the nats extra)
  advertise: 127.0.0.1:15002 # gRPC address callers subscribe to; default listen.grpc
  templates: {payment: ["/v1/charges/{id}"]}
  edges:                     # static edges (never age out)
    - {caller: "checkout POST /v1/orders", callee: "payment POST /v1/charges"}
    - {caller: "checkout POST /v1/orders", callee: "mailer POST /send", optional: true}
  alternatives: {payment: payment-backup}   # reroute while the primary is unavailable
  peers: {payment: 127.0.0.1:15102}         # gRPC addresses known up front (optional)
  max_ttl: 300               # cap on a received unavailability (seconds)
  max_clock_skew: 60         # versions past our clock + this are refused; hop token age
  optionality:               # learned optionality (docs/cascade.md)
    learn: true              # learn from correlated traces which dependencies an endpoint survives
    threshold: 3             # survivals (aged) before an edge is optional (learned)
    ratio: 0.8               # ... and survivals at least this share of the evidence
    half_life: 600           # seconds after which evidence weighs half
    ttl: 3600                # seconds without evidence before an edge's evidence is forgotten
    trickle_interval: 1.0    # one request per interval through an endpoint held unavailable
                             #   over a learned, required edge (0: never)
    success_statuses: ["2xx", "3xx"]   # what counts as our endpoint answering success
  instance: shipping-7d9f-x2 # this replica's name in updates; else POD_NAME, HOSTNAME, host:port
  quorum: 1.0                # fraction of an upstream endpoint's live instances that must
                             # report it unavailable before it is refused (1.0: every one)
  presence_interval: 10      # seconds between presence messages on our Watch streams
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from cascadebreaker.cascade import Endpoint
from cascadebreaker.sidecar.config import ConfigError, check_statuses, valid_address


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _endpoint(value: str) -> str:
    Endpoint.parse(value)  # ValueError names the problem
    return value


def _address(value: str) -> str:
    if not valid_address(value):
        raise ValueError("must be host:port")
    return value


class StaticEdge(_Strict):
    """One declared edge `caller -> callee` (endpoints written `service METHOD /route`)."""

    caller: str
    callee: str
    optional: bool = False

    @field_validator("caller", "callee")
    @classmethod
    def _endpoints(cls, value: str) -> str:
        return _endpoint(value)


class OptionalityConfig(_Strict):
    """Learned optionality (cascade/optionality.py)."""

    learn: bool = True
    threshold: float = Field(default=3.0, gt=0)
    ratio: float = Field(default=0.8, gt=0, le=1)
    half_life: float = Field(default=600.0, gt=0)
    ttl: float = Field(default=3600.0, gt=0)
    trickle_interval: float = Field(default=1.0, ge=0)
    success_statuses: tuple[int | str, ...] = ("2xx", "3xx")

    @field_validator("success_statuses")
    @classmethod
    def _statuses(cls, value: tuple[int | str, ...]) -> tuple[int | str, ...]:
        check_statuses(value, "2xx")
        return value


class CascadeConfig(_Strict):
    """How this sidecar takes part in the cascade."""

    enabled: bool = True
    secret: str | None = None
    learning: bool = True
    learn_from_traces: bool = True
    start_traces: bool = False
    edge_ttl: float = Field(default=600.0, gt=0)
    namespace: str = Field(default="ccb", pattern=r"^[A-Za-z0-9._-]{1,64}$")
    redis: str | None = None
    nats: str | None = None
    advertise: str | None = None
    templates: dict[str, list[str]] = Field(default_factory=dict)
    edges: list[StaticEdge] = Field(default_factory=list)
    alternatives: dict[str, str] = Field(default_factory=dict)
    peers: dict[str, str] = Field(default_factory=dict)
    max_ttl: float = Field(default=300.0, gt=0)
    # How far a peer's clock may run ahead: bounds update versions and hop token ages.
    max_clock_skew: float = Field(default=60.0, gt=0)
    optionality: OptionalityConfig = OptionalityConfig()
    instance: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._:\[\]-]{1,253}$")
    quorum: float = Field(default=1.0, gt=0, le=1)
    # Dependents count us live for presence_interval * 3 after each presence message.
    presence_interval: float = Field(default=10.0, gt=0)

    @field_validator("advertise")
    @classmethod
    def _advertise(cls, value: str | None) -> str | None:
        return None if value is None else _address(value)

    @field_validator("peers")
    @classmethod
    def _peers(cls, value: dict[str, str]) -> dict[str, str]:
        for address in value.values():
            _address(address)
        return value

    @field_validator("nats")
    @classmethod
    def _nats(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("nats://", "tls://")):
            raise ValueError("must be a nats:// URL")
        return value

    @field_validator("redis")
    @classmethod
    def _redis(cls, value: str | None) -> str | None:
        schemes = ("redis://", "rediss://", "unix://", "redis+cluster://")
        if value is not None and not value.startswith(schemes):
            raise ValueError("must be a redis:// URL")
        return value


def validate_cascade(
    data: dict[str, Any] | None, upstreams: Iterable[str] | None = None
) -> CascadeConfig:
    """Validate the raw `cascade:` mapping; ConfigError naming the first bad key. With the
    configured `upstreams`, `alternatives` must name them on both sides (an unknown name would
    be ignored silently: the reroute would never happen)."""
    try:
        config = CascadeConfig.model_validate(data or {})
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in ("cascade", *error["loc"]))
        message = str(error["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"{where}: {message}") from None
    if upstreams is not None:
        known = set(upstreams)
        for primary, alternative in config.alternatives.items():
            for name in (primary, alternative):
                if name not in known:
                    raise ConfigError(
                        f"cascade.alternatives.{primary}: {name!r} is not an upstream "
                        f"(configured: {', '.join(sorted(known)) or 'none'})"
                    )
            if primary == alternative:
                raise ConfigError(f"cascade.alternatives.{primary}: names itself")
    return config
