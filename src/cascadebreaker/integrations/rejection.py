"""How a rejected call looks on HTTP: 503, `retry-after`, and a JSON body naming the breaker.

Shared by the httpx transport (`on_open="respond"`) and the ASGI middleware, so a front end sees
the same answer whichever layer refused the call.
"""

from __future__ import annotations

import json
import math

from ..errors import CircuitOpenError

__all__ = ["REJECTED_HEADER", "rejection_body", "rejection_headers"]

REJECTED_HEADER = "x-ccb-rejected"


def rejection_headers(error: CircuitOpenError) -> dict[str, str]:
    """Headers of the 503: content type, the breaker's name, and `retry-after` when finite."""
    headers = {"content-type": "application/json", REJECTED_HEADER: error.name}
    if not math.isinf(error.retry_after):
        # Whole seconds, rounded up, at least 1: clients must not come back before the probe.
        headers["retry-after"] = str(max(1, math.ceil(error.retry_after)))
    return headers


def rejection_body(error: CircuitOpenError) -> bytes:
    """The JSON body: error, breaker, state, retry_after (null when forced open), reason (a
    Reason code: why it is open) and scope (local: this process alone; shared: the fleet)."""
    retry = error.retry_after
    return json.dumps(
        {
            "error": "circuit_open",
            "breaker": error.name,
            "state": error.state.value,
            "retry_after": None if math.isinf(retry) else round(retry, 3),
            "reason": error.reason or None,
            "scope": error.scope.value,
        }
    ).encode()
