"""Where the dashboard's sidecars come from: `--sidecar` URLs, the running demo, a Redis URL."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

__all__ = ["SourceError", "Sources", "admin_url", "demo_sources", "from_arguments", "redis_url"]


class SourceError(ValueError):
    """The sources given cannot be used (the message says which and why)."""


@dataclass(frozen=True)
class Sources:
    """What to follow: sidecars by admin URL (with their service when known) and more."""

    sidecars: dict[str, str | None] = field(default_factory=dict)  # admin URL -> service
    services: tuple[str, ...] = ()  # services that exist even before anyone reports them
    fault_urls: dict[str, str] = field(default_factory=dict)  # demo: service -> /_fault
    redis: str | None = None
    namespace: str = "ccb"

    def merged(self, other: Sources) -> Sources:
        """Both sets of sources (a service name already known is kept; `other`'s Redis wins)."""
        return Sources(
            {**other.sidecars, **self.sidecars},
            tuple(dict.fromkeys((*self.services, *other.services))),
            {**self.fault_urls, **other.fault_urls},
            other.redis or self.redis,
            other.namespace if other.redis else self.namespace,
        )


def admin_url(text: str) -> str:
    """A sidecar's admin URL, checked and normalised (`http://host:port`, no trailing slash)."""
    parts = urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SourceError(f"--sidecar {text!r}: expected an admin URL like http://127.0.0.1:15000")
    try:
        parts.port  # noqa: B018  (raises for a malformed port)
    except ValueError:
        raise SourceError(f"--sidecar {text!r}: malformed port") from None
    return f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"


def redis_url(text: str) -> str:
    """A Redis URL, checked."""
    scheme = urlsplit(text).scheme
    if scheme not in ("redis", "rediss", "unix"):
        raise SourceError(f"--redis {text!r}: expected redis://host:port/db")
    return text


def demo_sources() -> Sources:
    """The running `ccb demo` (its state file): every sidecar, every service, the fault switches."""
    from cascadebreaker.demo.control import DemoNotRunning, fault_url, read_state

    try:
        state = read_state()
    except DemoNotRunning as exc:
        raise SourceError(str(exc)) from None
    topology = state.topology
    return Sources(
        sidecars={
            spec.admin_url: name
            for name, spec in topology.services.items()
            if spec.admin_url is not None
        },
        services=tuple(topology.services),
        fault_urls={name: fault_url(topology, name) for name in topology.external},
    )


def from_arguments(
    sidecars: Sequence[str], demo: bool, redis: str | None, namespace: str
) -> Sources:
    """The sources of a `ccb dashboard` command line; SourceError when there is nothing to show."""
    given = Sources(
        sidecars={admin_url(u): None for u in sidecars},
        redis=redis_url(redis) if redis else None,
        namespace=namespace,
    )
    sources = demo_sources().merged(given) if demo else given
    if not sources.sidecars and not sources.redis:
        raise SourceError("nothing to show: give --sidecar ADMIN_URL, --demo or --redis URL")
    return sources
