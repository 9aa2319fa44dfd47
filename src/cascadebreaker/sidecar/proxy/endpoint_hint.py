"""A stand-in route template guesser: fold id-like path segments to `{id}`.

The cascade replaces this with its own resolver (`Sidecar.route_resolver`); it stays pure and
cheap because the proxy may call it for every request.
"""

from __future__ import annotations

import re
from typing import Final

_UUID: Final = re.compile(
    r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$"
)
_LONG_HEX: Final = re.compile(r"^[0-9a-fA-F]{16,}$")


def _is_id(segment: str) -> bool:
    return segment.isdigit() or bool(_UUID.match(segment) or _LONG_HEX.match(segment))


def route_template(path: str) -> str:
    """`/v1/charges/42?x=1` -> `/v1/charges/{id}` (query dropped; ids folded)."""
    path = path.split("?", 1)[0].split("#", 1)[0] or "/"
    segments = path.split("/")
    return "/".join("{id}" if segment and _is_id(segment) else segment for segment in segments)


def endpoint_hint(method: str, path: str) -> str:
    """`GET /v1/charges/42` -> `GET /v1/charges/{id}`: the endpoint a request serves."""
    return f"{method.upper()} {route_template(path)}"
