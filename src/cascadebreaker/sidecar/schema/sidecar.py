"""The sidecar's YAML (all but `cascade:`) validated with pydantic: errors name the key.

Model names match the plain classes of `config.py`: pydantic names them in some messages.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    computed_field,
    field_validator,
    model_validator,
)

from cascadebreaker.cascade.trust import SECRET_ENV, is_loopback
from cascadebreaker.sidecar.config import ConfigError, check_statuses

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HostPort(_Strict):
    """A listen address."""

    host: str
    port: int = Field(ge=0, le=65535)

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def _parse_host_port(value: Any) -> Any:
    """Accept `host:port` strings (and `[v6]:port`) as well as mappings."""
    if isinstance(value, str):
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError("must be host:port")
        return {"host": host.strip("[]"), "port": int(port)}
    return value


class ListenConfig(_Strict):
    """Where each listener binds; `null` disables one."""

    outbound: HostPort | None = HostPort(host="127.0.0.1", port=15001)
    inbound: HostPort | None = HostPort(host="127.0.0.1", port=15006)
    grpc: HostPort | None = HostPort(host="127.0.0.1", port=15002)
    admin: HostPort | None = HostPort(host="127.0.0.1", port=15000)
    # Connections redirected by `ccb netinit` (iptables REDIRECT); off unless set.
    transparent: HostPort | None = None

    @field_validator("outbound", "inbound", "grpc", "admin", "transparent", mode="before")
    @classmethod
    def _addresses(cls, value: Any) -> Any:
        return _parse_host_port(value)


class WindowConfig(_Strict):
    """The calls a rate policy judges: the last `size` calls, or those of the last `seconds`
    (kept in `buckets` slices). Neither given: the last 100 calls."""

    size: int | None = Field(default=None, ge=1)
    seconds: float | None = Field(default=None, gt=0)
    buckets: int = Field(default=10, ge=1)

    @model_validator(mode="after")
    def _one_shape(self) -> WindowConfig:
        if self.size is not None and self.seconds is not None:
            raise ValueError("give size (calls) or seconds, not both")
        return self


class FailureRateConfig(_Strict):
    """Open when failures are at least `rate` of the window's calls (after `minimum_calls`)."""

    rate: float = Field(default=0.5, gt=0, le=1)
    minimum_calls: int = Field(default=10, ge=1)
    window: WindowConfig = WindowConfig()


class SlowCallRateConfig(FailureRateConfig):
    """Open when calls slower than `duration` seconds are at least `rate` of the window."""

    duration: float = Field(gt=0)


class BreakerConfig(_Strict):
    """Parameters of an upstream's circuit breaker."""

    failure_threshold: int = Field(default=5, ge=1)
    recovery_timeout: float = Field(default=20.0, gt=0)
    half_open_max_calls: int = Field(default=1, ge=1)
    # Trip policies besides consecutive failures. `failure_rate` replaces the consecutive
    # count unless `failure_threshold` is also given (then either one opens the circuit);
    # `slow_call_rate` is added to the others.
    failure_rate: FailureRateConfig | None = None
    slow_call_rate: SlowCallRateConfig | None = None
    # Seconds a HALF_OPEN probe may take before it counts as failed (default: the open wait,
    # at least 1 s); judge a round of probes by their failure rate instead of all-or-nothing.
    probe_timeout: float | None = Field(default=None, gt=0)
    half_open_failure_rate: float | None = Field(default=None, gt=0, le=1)
    # `upstream`: one breaker for the whole upstream; `endpoint`: one per endpoint (method +
    # route template), so one failing endpoint does not open its healthy siblings.
    scope: Literal["upstream", "endpoint"] = "upstream"
    max_endpoints: int = Field(default=64, ge=1, le=4096)  # past it: the upstream's breaker

    @computed_field  # type: ignore[prop-decorator]
    @property
    def consecutive_failures(self) -> bool:
        """Consecutive failures open the circuit unless `failure_rate` replaces them."""
        return self.failure_rate is None or "failure_threshold" in self.model_fields_set


class QuorumConfig(_Strict):
    """A fleet quorum for breakers in Redis: one sick replica does not open the circuit for
    all; it trips locally until `reporters` replicas (or `fraction` of the live ones) agree
    within `window` seconds."""

    reporters: int = Field(default=2, ge=1)
    fraction: float = Field(default=0.0, ge=0, le=1)
    window: float = Field(default=30.0, gt=0)


class RetryBudgetConfig(_Strict):
    """Retries may add at most `ratio` of the original calls, plus `min_per_second`."""

    ratio: float = Field(default=0.2, ge=0, le=1)
    min_per_second: float = Field(default=5.0, ge=0)


class RetryConfig(_Strict):
    """Retries of failed calls without a request body; off (attempts 0) by default."""

    attempts: int = Field(default=0, ge=0, le=10)
    on_statuses: tuple[int, ...] = (502, 503, 504)
    budget: RetryBudgetConfig = RetryBudgetConfig()

    @field_validator("on_statuses")
    @classmethod
    def _statuses(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        for status in value:
            if not 100 <= status <= 599:
                raise ValueError(f"{status} is not an HTTP status")
        return value


class UpstreamConfig(_Strict):
    """One upstream the app may call through the outbound listener.

    `urls` lists the instances (replicas) of the upstream when the caller's sidecar picks
    them itself: calls go round robin and a retry goes to the next instance. `url` alone is
    one address (a single instance, or a Service VIP that picks for us: then a retry may land
    on the same sick replica)."""

    url: str
    urls: tuple[str, ...] = ()
    timeout: float = Field(default=10.0, gt=0)
    connect_timeout: float | None = Field(default=None, gt=0)
    breaker: BreakerConfig = BreakerConfig()
    retries: RetryConfig = RetryConfig()
    # Statuses that count as breaker failures: numbers or classes like "5xx".
    failure_statuses: tuple[int | str, ...] = ("5xx",)
    max_idle_connections: int = Field(default=64, ge=0)
    # Host header sent upstream; default is the authority of `url`.
    host_header: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _first_url(cls, data: Any) -> Any:
        if isinstance(data, dict) and "urls" in data and "url" not in data:
            urls = data["urls"]
            if isinstance(urls, list | tuple) and urls:
                return {**data, "url": urls[0]}
        return data

    @field_validator("urls")
    @classmethod
    def _urls(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for i, url in enumerate(value):
            try:
                cls._url(url)
            except ValueError as exc:
                raise ValueError(f"item {i} {exc}") from None
        if len(set(value)) != len(value):
            raise ValueError("lists an instance twice")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> UpstreamConfig:
        if self.urls and self.url not in self.urls:
            raise ValueError("give url or urls, not both")
        return self

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme != "http":
            raise ValueError("must be an http:// URL")
        if not parts.hostname:
            raise ValueError("must name a host")
        try:
            parts.port  # noqa: B018 - validates the port
        except ValueError as exc:
            raise ValueError("has an invalid port") from exc
        if parts.query or parts.fragment:
            raise ValueError("must not have a query or fragment")
        return value

    @field_validator("failure_statuses")
    @classmethod
    def _failure_statuses(cls, value: tuple[int | str, ...]) -> tuple[int | str, ...]:
        check_statuses(value, "5xx")
        return value


class LimitsConfig(_Strict):
    """Bounds on what a client may send."""

    max_header_bytes: int = Field(default=32768, ge=256)
    max_header_count: int = Field(default=100, ge=1)
    # Seconds a client may take to send a request head, and may stay idle between requests.
    header_timeout: float = Field(default=30.0, gt=0)
    idle_timeout: float = Field(default=75.0, gt=0)
    # A request body may take `body_timeout` seconds plus one second per `min_body_rate` bytes
    # received, and never go `body_timeout` seconds without a byte; then 408 (the client's
    # slowness is never counted against the upstream).
    body_timeout: float = Field(default=30.0, gt=0)
    min_body_rate: float = Field(default=1024.0, ge=0)
    # Seconds a WebSocket tunnel may pass no byte either way before it is closed.
    tunnel_idle_timeout: float = Field(default=300.0, gt=0)
    # Open client connections (outbound + inbound listeners) before new ones get a 503;
    # default: what the file descriptor limit allows after a reserve for admin and upstreams.
    max_connections: int | None = Field(default=None, ge=1)


class InterceptionConfig(_Strict):
    """What the transparent listener does with destinations that are no upstream's."""

    unknown_destinations: Literal["relay", "refuse"] = "relay"
    # Seconds between re-resolving the upstreams' host names to addresses.
    resolve_interval: float = Field(default=30.0, gt=0)
    connect_timeout: float = Field(default=5.0, gt=0)


class GrpcTlsConfig(_Strict):
    """TLS for the gRPC listener (`Call`, `Check`, `Watch`) and our Watch streams to peers.

    The files are read at start and again on SIGHUP or when they change (`reload_interval`);
    a bad new set is logged and the old one kept."""

    cert: Path  # PEM certificate chain: served to clients, and shown to peers when they ask
    key: Path  # its PEM private key
    # PEM CA bundle that peers' certificates must chain to (default: the system's roots);
    # with `client_auth`, clients of our listener must show a certificate signed by it.
    ca: Path | None = None
    client_auth: bool = False  # mutual TLS: refuse clients without a certificate from `ca`
    # Name checked on peers' certificates instead of the host we dial (peers addressed by IP).
    server_name: str | None = None
    reload_interval: float = Field(default=10.0, gt=0)

    @model_validator(mode="after")
    def _client_auth_needs_ca(self) -> GrpcTlsConfig:
        if self.client_auth and self.ca is None:
            raise ValueError(
                "grpc_tls.ca: required with grpc_tls.client_auth (the CA that signs the "
                "clients' certificates)"
            )
        return self


class SidecarConfig(_Strict):
    """The whole sidecar configuration file."""

    service: str
    app: str | None = None
    listen: ListenConfig = ListenConfig()
    store: str = "memory"
    # A shared store that has not connected yet keeps /readyz at 503 (the breakers work on
    # local state meanwhile); true: ready anyway.
    store_optional: bool = False
    quorum: QuorumConfig | None = None  # with a redis:// store only
    upstreams: dict[str, UpstreamConfig] = Field(default_factory=dict)
    limits: LimitsConfig = LimitsConfig()
    grpc_tls: GrpcTlsConfig | None = None  # None: plaintext gRPC (loopback use)
    interception: InterceptionConfig = InterceptionConfig()
    # Seconds that in-flight requests get to finish after SIGTERM.
    shutdown_grace: float = Field(default=10.0, ge=0)
    # Owned by the cascade; accepted as-is for now.
    cascade: dict[str, Any] | None = None
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # Listen beyond loopback with the cascade on but no secret: updates and hop tokens would be
    # unauthenticated, so this must be asked for.
    allow_insecure: bool = False

    @computed_field  # type: ignore[prop-decorator]
    @property
    def app_upstream(self) -> UpstreamConfig | None:
        """`app` as the inbound listener's upstream: the app is slow, never a failing upstream."""
        if self.app is None:
            return None
        return UpstreamConfig(url=self.app, timeout=60.0, failure_statuses=())

    @field_validator("service")
    @classmethod
    def _service(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("must be a name of letters, digits, '.', '_' or '-'")
        return value

    @field_validator("app")
    @classmethod
    def _app(cls, value: str | None) -> str | None:
        if value is not None:
            UpstreamConfig._url(value)
        return value

    @field_validator("store")
    @classmethod
    def _store(cls, value: str) -> str:
        schemes = ("redis://", "rediss://", "unix://", "redis+cluster://")
        if value != "memory" and not value.startswith(schemes):
            raise ValueError("must be 'memory', a redis:// URL or redis+cluster://host:port")
        return value

    @field_validator("upstreams")
    @classmethod
    def _upstream_names(cls, value: dict[str, UpstreamConfig]) -> dict[str, UpstreamConfig]:
        for name in value:
            if not _NAME.match(name):
                raise ValueError(f"{name!r} is not a valid upstream name")
        return value

    @model_validator(mode="after")
    def _quorum_needs_redis(self) -> SidecarConfig:
        if self.quorum is not None and self.store == "memory":
            raise ValueError("quorum: needs a shared store (store: redis://...)")
        return self

    @model_validator(mode="after")
    def _inbound_needs_app(self) -> SidecarConfig:
        if self.listen.inbound is not None and self.app is None:
            raise ValueError("app: required when listen.inbound is set")
        return self

    @model_validator(mode="after")
    def _exposed_needs_secret(self) -> SidecarConfig:
        cascade = self.cascade or {}
        if self.allow_insecure or cascade.get("enabled", True) is False:
            return self
        if cascade.get("secret") or os.environ.get(SECRET_ENV):
            return self
        for name in ("outbound", "inbound", "grpc", "admin"):
            address: HostPort | None = getattr(self.listen, name)
            if address is None or address.host == "localhost" or is_loopback(address.host):
                continue
            raise ValueError(
                f"allow_insecure: listen.{name} {address} is not loopback and no secret is "
                f"set (cascade.secret or {SECRET_ENV}); set one, or allow_insecure: true"
            )
        return self


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, int | float) else str(value)


def _describe(error: Any) -> str:
    """One error of a ValidationError as `key.path: message`."""
    loc = ".".join(str(part) for part in error["loc"] if not str(part).startswith("function-"))
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind == "extra_forbidden":
        message = "unknown key"
    elif kind == "missing":
        message = "required"
    elif kind == "greater_than":
        message = f"must be > {_number(ctx.get('gt'))}"
    elif kind == "greater_than_equal":
        message = f"must be >= {_number(ctx.get('ge'))}"
    elif kind == "less_than_equal":
        message = f"must be <= {_number(ctx.get('le'))}"
    elif kind == "value_error":
        message = str(ctx.get("error", error["msg"]))
    else:
        message = error["msg"][0].lower() + error["msg"][1:]
    if kind == "value_error" and message.startswith(
        ("app: ", "allow_insecure: ", "grpc_tls.", "quorum: ")
    ):
        return message  # a model-level rule that names its own key
    return f"{loc}: {message}" if loc else message


def validate_sidecar(data: Any) -> SidecarConfig:
    if not isinstance(data, dict):
        raise ConfigError("the configuration must be a mapping")
    try:
        return SidecarConfig.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ConfigError(_describe(errors[0]) + more) from None
