"""The sidecar's configuration as the serving process holds it: plain frozen, slotted classes.

`schema/` validates a YAML file with pydantic (errors name the key) and builds these from
the validated form; `ccb sidecar` hands that form to the serving process as JSON, which builds
them with `config_from_dict` and never imports pydantic (~13 MB of a sidecar's memory). Every
class here mirrors the schema model of the same name, field for field (a test compares them).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, Union, cast, get_args, get_origin, get_type_hints

from cascadebreaker.core.policies import ConsecutiveFailures, FailureRate, SlowCallRate, TripPolicy
from cascadebreaker.core.windows import CountWindow, TimeWindow
from cascadebreaker.stores.quorum import FleetQuorum

_T = TypeVar("_T")


class ConfigError(Exception):
    """The configuration file is missing, unreadable or invalid; the message names the key."""


# Sets of HTTP statuses in config, as codes or classes (`503`, `"5xx"`); the mesh uses them too.
def check_statuses(items: Iterable[int | str], example: str) -> None:
    """Raise ValueError naming the first item neither a status nor a class like `5xx`."""
    for item in items:
        if isinstance(item, int) and not 100 <= item <= 599:
            raise ValueError(f"{item} is not an HTTP status")
        if isinstance(item, str) and not (
            len(item) == 3 and item[0] in "12345" and item[1:] == "xx"
        ):
            raise ValueError(f"{item!r} is neither a status nor a class like '{example}'")


def status_table(items: Iterable[int | str]) -> tuple[bool, ...]:
    """Index by status code (0..599): True when the code is in the set."""
    table = [False] * 600
    for item in items:
        if isinstance(item, int):
            table[item] = True
        else:
            first = int(item[0]) * 100
            table[first : first + 100] = [True] * 100
    return tuple(table)


def valid_address(value: str) -> bool:
    """True for `host:port` (a port of digits, 1-65535)."""
    host, sep, port = value.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) < 65536)


@dataclass(frozen=True, slots=True)
class HostPort:
    """A listen address."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class ListenConfig:
    """Where each listener binds; None: disabled."""

    outbound: HostPort | None
    inbound: HostPort | None
    grpc: HostPort | None
    admin: HostPort | None
    transparent: HostPort | None


@dataclass(frozen=True, slots=True)
class WindowConfig:
    """The calls a rate policy judges: the last `size` calls, or those of the last `seconds`."""

    size: int | None
    seconds: float | None
    buckets: int

    def spec(self) -> CountWindow | TimeWindow:
        """The library's window spec."""
        if self.seconds is not None:
            return TimeWindow(self.seconds, self.buckets)
        return CountWindow(self.size or 100)


@dataclass(frozen=True, slots=True)
class FailureRateConfig:
    """Open when failures are at least `rate` of the window's calls (after `minimum_calls`)."""

    rate: float
    minimum_calls: int
    window: WindowConfig


@dataclass(frozen=True, slots=True)
class SlowCallRateConfig:
    """Open when calls slower than `duration` seconds are at least `rate` of the window."""

    rate: float
    minimum_calls: int
    window: WindowConfig
    duration: float


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    """Parameters of an upstream's circuit breaker."""

    failure_threshold: int
    recovery_timeout: float
    half_open_max_calls: int
    failure_rate: FailureRateConfig | None
    slow_call_rate: SlowCallRateConfig | None
    probe_timeout: float | None
    half_open_failure_rate: float | None
    scope: Literal["upstream", "endpoint"]
    max_endpoints: int
    # Whether consecutive failures open the circuit: unless `failure_rate` replaces them
    # (decided by the schema, which knows whether `failure_threshold` was written).
    consecutive_failures: bool

    def policies(self) -> list[TripPolicy]:
        """The library's trip policies for these settings."""
        policies: list[TripPolicy] = []
        if self.consecutive_failures:
            policies.append(ConsecutiveFailures(self.failure_threshold))
        rate = self.failure_rate
        if rate is not None:
            policies.append(FailureRate(rate.window.spec(), rate.rate, rate.minimum_calls))
        slow = self.slow_call_rate
        if slow is not None:
            policies.append(
                SlowCallRate(slow.duration, slow.window.spec(), slow.rate, slow.minimum_calls)
            )
        return policies


@dataclass(frozen=True, slots=True)
class QuorumConfig:
    """A fleet quorum for breakers in Redis."""

    reporters: int
    fraction: float
    window: float

    def spec(self) -> FleetQuorum:
        """The library's quorum."""
        return FleetQuorum(self.reporters, self.fraction, self.window)


@dataclass(frozen=True, slots=True)
class RetryBudgetConfig:
    """Retries may add at most `ratio` of the original calls, plus `min_per_second`."""

    ratio: float
    min_per_second: float


@dataclass(frozen=True, slots=True)
class RetryConfig:
    """Retries of failed calls without a request body."""

    attempts: int
    on_statuses: tuple[int, ...]
    budget: RetryBudgetConfig


@dataclass(frozen=True, slots=True)
class UpstreamConfig:
    """One upstream the app may call through the outbound listener."""

    url: str
    urls: tuple[str, ...]
    timeout: float
    connect_timeout: float | None
    breaker: BreakerConfig
    retries: RetryConfig
    failure_statuses: tuple[int | str, ...]
    max_idle_connections: int
    host_header: str | None

    def instance_urls(self) -> tuple[str, ...]:
        """The URL of every instance the sidecar calls (one when only `url` is set)."""
        return self.urls or (self.url,)

    def failure_table(self) -> tuple[bool, ...]:
        """Index by status code (0..599): True when that status is a breaker failure."""
        return status_table(self.failure_statuses)


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    """Bounds on what a client may send."""

    max_header_bytes: int
    max_header_count: int
    header_timeout: float
    idle_timeout: float
    body_timeout: float
    min_body_rate: float
    tunnel_idle_timeout: float
    max_connections: int | None


@dataclass(frozen=True, slots=True)
class InterceptionConfig:
    """What the transparent listener does with destinations that are no upstream's."""

    unknown_destinations: Literal["relay", "refuse"]
    resolve_interval: float
    connect_timeout: float


@dataclass(frozen=True, slots=True)
class GrpcTlsConfig:
    """TLS for the gRPC listener and our Watch streams to peers."""

    # Paths as the file gave them: the serving process never imports pathlib (0.2 MiB).
    cert: str
    key: str
    ca: str | None
    client_auth: bool
    server_name: str | None
    reload_interval: float


@dataclass(frozen=True, slots=True)
class StaticEdge:
    """One declared edge `caller -> callee` (endpoints written `service METHOD /route`)."""

    caller: str
    callee: str
    optional: bool


@dataclass(frozen=True, slots=True)
class OptionalityConfig:
    """Learned optionality (cascade/optionality.py)."""

    learn: bool
    threshold: float
    ratio: float
    half_life: float
    ttl: float
    trickle_interval: float
    success_statuses: tuple[int | str, ...]

    def success_table(self) -> tuple[bool, ...]:
        """Index by status (0..599): True when our endpoint answered success."""
        return status_table(self.success_statuses)


@dataclass(frozen=True, slots=True)
class CascadeConfig:
    """How this sidecar takes part in the cascade (the `cascade:` section; docs/sidecar.md)."""

    enabled: bool
    secret: str | None
    learning: bool
    learn_from_traces: bool
    start_traces: bool
    edge_ttl: float
    namespace: str
    redis: str | None
    nats: str | None
    advertise: str | None
    templates: dict[str, list[str]]
    edges: list[StaticEdge]
    alternatives: dict[str, str]
    peers: dict[str, str]
    max_ttl: float
    max_clock_skew: float
    optionality: OptionalityConfig
    instance: str | None
    quorum: float
    presence_interval: float


@dataclass(frozen=True, slots=True)
class SidecarConfig:
    """The whole sidecar configuration file, validated."""

    service: str
    app: str | None
    # `app` as the inbound listener's upstream (60 s timeout, no status a breaker failure).
    app_upstream: UpstreamConfig | None
    listen: ListenConfig
    store: str
    store_optional: bool
    quorum: QuorumConfig | None
    upstreams: dict[str, UpstreamConfig]
    limits: LimitsConfig
    grpc_tls: GrpcTlsConfig | None
    interception: InterceptionConfig
    shutdown_grace: float
    cascade: CascadeConfig
    log_level: Literal["debug", "info", "warning", "error"]
    allow_insecure: bool
    # The mapping this was validated from (for `--listen` overrides, validated like the file);
    # empty in the serving process.
    source: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


def config_to_dict(config: SidecarConfig) -> dict[str, Any]:
    """The validated form of `config` (JSON-able): what `config_from_dict` builds it from."""
    data = dataclasses.asdict(cast(Any, config))
    del data["source"]
    return cast(dict[str, Any], _jsonable(data))


def config_from_dict(data: Mapping[str, Any]) -> SidecarConfig:
    """Build the config from its validated form (trusted: no checks, no defaults)."""
    return _build(SidecarConfig, data)


def cascade_config_from_dict(data: Mapping[str, Any]) -> CascadeConfig:
    """The `cascade:` section alone, from its validated form."""
    return _build(CascadeConfig, data)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


@functools.cache
def _hints(cls: Any) -> dict[str, Any]:
    return get_type_hints(cls)


def _build(cls: type[_T], data: Mapping[str, Any]) -> _T:
    hints = _hints(cast(Any, cls))
    names = [f.name for f in dataclasses.fields(cast(Any, cls)) if f.name in data]
    return cls(**{name: _convert(hints[name], data[name]) for name in names})


def _convert(hint: Any, value: Any) -> Any:
    """`value` (parsed JSON) as the annotation `hint` wants it: classes, tuples, lists."""
    if value is None:
        return None
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):  # `X | None`: build X; `int | str`: as it is
        arms = [arm for arm in get_args(hint) if arm is not type(None)]
        return _convert(arms[0], value) if len(arms) == 1 else value
    if origin is tuple:
        return tuple(_convert(get_args(hint)[0], item) for item in value)
    if origin is list:
        return [_convert(get_args(hint)[0], item) for item in value]
    if origin is dict:
        return {key: _convert(get_args(hint)[1], item) for key, item in value.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _build(hint, value)
    return value
