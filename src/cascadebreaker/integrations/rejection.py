"""How a rejected call looks on HTTP: 503, `retry-after`, and a JSON body naming the breaker.

Shared by the httpx transport (`on_open="respond"`) and the ASGI middleware, so a front end sees
the same answer whichever layer refused the call.
"""

from __future__ import annotations

import json
import math

from ..contract import refusal_reason, whole_service
from ..contract import rejection_body as contract_body
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
    """The contract's rejection body (docs/contract.md): error, reasonCode, circuitState,
    retryAfter (null when forced open), causeChain (the breaker as its root), breaker, and
    trippedBy (the Reason code that opened it) and scope (local: this process; shared: fleet)."""
    reason = refusal_reason(error.reason)
    body = contract_body(
        error=f"circuit {error.state.value}",
        reason=reason,
        state=error.state,
        retry_after=error.retry_after,
        cause_chain=[{"endpoint": whole_service(error.name), "reason": reason.value}],
        breaker=error.name,
    )
    body["trippedBy"] = error.reason or None
    body["scope"] = error.scope.value
    return json.dumps(body).encode()
