"""A refused `Call` as gRPC's standard rich error: `google.rpc.Status` in the
`grpc-status-details-bin` trailer, so grpc-js, grpc-go and grpcio read it with stock helpers.

    code     UNAVAILABLE
    details  google.rpc.ErrorInfo{reason: "CIRCUIT_OPEN" | "CASCADE" | "FORCED_OPEN" |
                                  "PROBE_BUDGET", domain: "cascadebreaker",
                                  metadata: {upstream, endpoint?, circuitState, reasonCode,
                                             retryAfter, causeChain}}
             google.rpc.RetryInfo{retry_delay}   (absent when forced open: no time to promise)

ErrorInfo.reason is the reasonCode in UPPER_SNAKE_CASE, as AIP-193 asks; the metadata carries
the JSON words unchanged (`reasonCode: circuit_open`, `circuitState: OPEN`, `retryAfter` in
seconds, `causeChain` as the JSON list of the HTTP body). docs/contract.md has the mapping.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from cascadebreaker.contract import CAUSE_CHAIN, CIRCUIT_STATE, REASON_CODE, RETRY_AFTER

__all__ = ["DOMAIN", "STATUS_DETAILS_METADATA", "rejection_status"]

DOMAIN = "cascadebreaker"
STATUS_DETAILS_METADATA = "grpc-status-details-bin"


def rejection_status(message: str, body: dict[str, Any]) -> status_pb2.Status:
    """The Status of a refused call, from the contract's rejection body (the HTTP 503's)."""
    metadata = {key: str(body[key]) for key in ("upstream", "endpoint", "service") if body.get(key)}
    metadata[CIRCUIT_STATE] = str(body.get(CIRCUIT_STATE, ""))
    metadata[REASON_CODE] = str(body.get(REASON_CODE, ""))
    retry = body.get(RETRY_AFTER)
    if retry is not None:
        metadata[RETRY_AFTER] = f"{float(retry):.3f}"
    metadata[CAUSE_CHAIN] = json.dumps(body.get(CAUSE_CHAIN, []), separators=(",", ":"))
    reason = metadata[REASON_CODE].upper()
    details: list[Any] = [
        error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN, metadata=metadata)
    ]
    if retry is not None:
        delay = duration_pb2.Duration()
        delay.FromMilliseconds(round(float(retry) * 1000))
        details.append(error_details_pb2.RetryInfo(retry_delay=delay))
    packed = []
    for detail in details:
        holder = any_pb2.Any()
        holder.Pack(detail)
        packed.append(holder)
    return status_pb2.Status(code=code_pb2.UNAVAILABLE, message=message, details=packed)
