"""Telling a refusal (no work done: a breaker or the cascade said no) from a failure."""

from __future__ import annotations

from typing import Any

# Keys that mark a 503 body as a refusal: our services' `{"status": "refused"}`, the sidecar's
# breaker rejection (`circuitState`) and the cascade's (a cause chain).
_REFUSAL_KEYS = ("circuitState", "cause", "causeChain", "cause_chain")


def is_refusal(status: int, body: Any) -> bool:
    """True for a 503 whose JSON body says the call was refused before any work."""
    if status != 503 or not isinstance(body, dict):
        return False
    return body.get("status") == "refused" or any(key in body for key in _REFUSAL_KEYS)
