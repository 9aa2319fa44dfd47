"""Endpoints (service + method + route template) and the route templates that name them."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "ANY",
    "OVERFLOW_TEMPLATE",
    "Endpoint",
    "RouteTemplates",
    "fold_path",
    "normalize_template",
]

ANY: Final = "*"
# The one endpoint per service that absorbs every route past the cardinality cap.
OVERFLOW_TEMPLATE: Final = "/*"

# One regex pass in C is cheaper than a Python loop over segments.
_ID_SEGMENT: Final = re.compile(
    r"(?<=/)(?:\d+"
    r"|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    r"|[0-9a-fA-F]{16,})(?=/|$)"
)
_TOKEN: Final = re.compile(r"[^\s]+")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One endpoint of one service: `payment POST /v1/charges/{id}`."""

    service: str
    method: str
    template: str

    def __post_init__(self) -> None:
        for part in (self.service, self.method, self.template):
            if not part or not _TOKEN.fullmatch(part):
                raise ValueError(f"invalid endpoint part {part!r} (empty or has spaces)")

    def __str__(self) -> str:
        return f"{self.service} {self.method} {self.template}"

    @classmethod
    def parse(cls, text: str) -> Endpoint:
        """Parse the str form `service METHOD /template`; raises ValueError when malformed."""
        parts = text.split(" ")
        if len(parts) != 3:
            raise ValueError(f"endpoint must be 'service METHOD /template', got {text!r}")
        return cls(parts[0], parts[1], parts[2])

    @classmethod
    def service_wide(cls, service: str) -> Endpoint:
        """The endpoint standing for a whole service (a per-service breaker)."""
        return cls(service, ANY, ANY)

    @classmethod
    def overflow(cls, service: str) -> Endpoint:
        """The endpoint that absorbs routes past the per-service cardinality cap."""
        return cls(service, ANY, OVERFLOW_TEMPLATE)

    @property
    def is_service_wide(self) -> bool:
        """True for the endpoint naming a whole service."""
        return self.method == ANY and self.template == ANY


def fold_path(path: str) -> str:
    """Drop the query string and fold numeric, UUID and long-hex segments to `{id}`."""
    cut = path.find("?")
    if cut >= 0:
        path = path[:cut]
    if not path.startswith("/"):
        path = "/" + path
    return _ID_SEGMENT.sub("{id}", path)


def normalize_template(template: str) -> str:
    """Rename every `{param}` segment to `{id}`: parameter names are not part of identity."""
    if "{" not in template:
        return template
    return "/".join(
        "{id}" if s.startswith("{") and s.endswith("}") else s for s in template.split("/")
    )


@dataclass(frozen=True, slots=True)
class _Template:
    text: str
    # None marks a `{param}` segment that matches any single segment.
    segments: tuple[str | None, ...]
    literals: int


def _compile(template: str) -> _Template:
    if not template.startswith("/"):
        raise ValueError(f"route template must start with '/': {template!r}")
    segs = tuple(
        None if s.startswith("{") and s.endswith("}") else s for s in template[1:].split("/")
    )
    # Two sidecars configured with `{charge}` and `{id}` must still name the same endpoint.
    return _Template(normalize_template(template), segs, sum(s is not None for s in segs))


class RouteTemplates:
    """Name the endpoint a request targets: configured templates first, then id folding.

    Cardinality is bounded per service: once `max_per_service` distinct (method, template)
    pairs are known, any new one maps to `Endpoint.overflow(service)`.
    """

    def __init__(
        self,
        templates: Mapping[str, Iterable[str]] | None = None,
        *,
        max_per_service: int = 256,
        cache_size: int = 4096,
    ) -> None:
        if max_per_service < 1:
            raise ValueError("max_per_service must be >= 1")
        self._max = max_per_service
        self._by_service: dict[str, dict[int, list[_Template]]] = {}
        self._known: dict[str, set[tuple[str, str]]] = {}
        # (service, method, raw path) -> Endpoint; the hot path for repeated paths.
        self._cache: dict[tuple[str, str, str], Endpoint] = {}
        self._cache_size = cache_size
        # The last line named, compared before the cache is asked: a service sees one line
        # again and again, and comparing three strings costs less than hashing fresh ones.
        # One tuple, replaced whole: a reader on another thread sees an old line or a new one.
        self._last: tuple[str, str, str, Endpoint] | None = None
        # Bumped whenever a template is added: memos of endpoints kept elsewhere are stale then.
        self.version = 0
        for service, items in (templates or {}).items():
            for t in items:
                self.add(service, t)

    def add(self, service: str, template: str) -> None:
        """Declare a route template such as `/v1/charges/{id}` for `service`."""
        compiled = _compile(template)
        by_len = self._by_service.setdefault(service, {})
        bucket = by_len.setdefault(len(compiled.segments), [])
        if any(t.text == compiled.text for t in bucket):
            return
        bucket.append(compiled)
        # Most literal segments first: `/v1/charges/refunds` beats `/v1/charges/{id}`.
        bucket.sort(key=lambda t: -t.literals)
        self._cache.clear()
        self._last = None
        self.version += 1

    def endpoint(self, service: str, method: str, path: str) -> Endpoint:
        """Return the endpoint for a request to `service` with `method` and raw `path`."""
        last = self._last
        if last is not None and last[2] == path and last[1] == method and last[0] == service:
            return last[3]
        key = (service, method, path)
        hit = self._cache.get(key)
        if hit is not None:
            self._last = (service, method, path, hit)
            return hit
        method = method.upper()
        template = self._match(service, path)
        if template is None:
            template = fold_path(path)
        endpoint = self._admit(service, method, template)
        if len(self._cache) >= self._cache_size:
            self._cache.clear()  # cheap bound; refills with the hot paths
        self._cache[key] = endpoint
        self._last = (service, method, path, endpoint)
        return endpoint

    def known(self, service: str) -> int:
        """How many distinct endpoints of `service` have been named (overflow excluded)."""
        return len(self._known.get(service, ()))

    def _match(self, service: str, path: str) -> str | None:
        by_len = self._by_service.get(service)
        if not by_len:
            return None
        cut = path.find("?")
        if cut >= 0:
            path = path[:cut]
        segs = path.lstrip("/").split("/")
        for t in by_len.get(len(segs), ()):
            if all(p is None or p == s for p, s in zip(t.segments, segs, strict=True)):
                return t.text
        return None

    def _admit(self, service: str, method: str, template: str) -> Endpoint:
        known = self._known.setdefault(service, set())
        pair = (method, template)
        if pair not in known:
            if len(known) >= self._max:
                return Endpoint.overflow(service)
            known.add(pair)
        return Endpoint(service, method, template)
