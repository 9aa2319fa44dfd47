"""A rejection as gRPC's standard rich error: `google.rpc.Status` + ErrorInfo + RetryInfo.

    status = rejection_status(error)                 # google.rpc.Status (protobuf message)
    rpc = rejection_rpc_status(error)                # grpc.Status: code, details, trailers
    facts = parse_rejection(rpc_error)               # back from a client's grpc.RpcError

The Status travels in the `grpc-status-details-bin` trailer, as every gRPC library's
"rich error" helpers expect (Go `status.FromError`, Java `StatusProto.fromThrowable`, Python
`grpc_status.rpc_status.from_call`). Code UNAVAILABLE; details:
- `google.rpc.ErrorInfo{reason: "CIRCUIT_OPEN" | "FORCED_OPEN" | "PROBE_BUDGET",
  domain: "cascadebreaker", metadata: {breaker, circuitState, reasonCode, retryAfter,
  causeChain}}` (ErrorInfo reasons are UPPER_SNAKE_CASE by AIP-193; the metadata carries the
  words of the HTTP body unchanged: `reasonCode: circuit_open`; docs/contract.md);
- `google.rpc.RetryInfo{retry_delay}` when the circuit will admit a probe (absent when forced
  open: there is no time to promise).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from .. import contract
from ..contract import (
    Reason,
    pick,
    refusal_reason,
    whole_service,
)
from ..errors import CircuitOpenError

__all__ = [
    "DOMAIN",
    "ERROR_REASON",
    "RejectionDetails",
    "is_refusal",
    "parse_rejection",
    "rejection_rpc_status",
    "rejection_status",
]

DOMAIN = "cascadebreaker"
ERROR_REASON = "CIRCUIT_OPEN"
# Every ErrorInfo.reason of a refusal: the reasonCode upper-cased.
_REASONS = frozenset(
    r.value.upper() for r in (Reason.CIRCUIT_OPEN, Reason.FORCED_OPEN, Reason.PROBE_BUDGET)
) | {Reason.CASCADE.value.upper()}


def rejection_status(error: CircuitOpenError) -> status_pb2.Status:
    """The `google.rpc.Status` for a rejection: UNAVAILABLE, ErrorInfo, RetryInfo if finite."""
    retry = error.retry_after
    reason = refusal_reason(error.reason)
    chain = [{"endpoint": whole_service(error.name), "reason": reason.value}]
    metadata = {
        "breaker": error.name,
        contract.CIRCUIT_STATE: error.state.value,
        contract.REASON_CODE: reason.value,
    }
    if not math.isinf(retry):
        metadata[contract.RETRY_AFTER] = f"{retry:.3f}"
    metadata[contract.CAUSE_CHAIN] = json.dumps(chain, separators=(",", ":"))
    upper = reason.value.upper()
    details = [error_details_pb2.ErrorInfo(reason=upper, domain=DOMAIN, metadata=metadata)]
    if not math.isinf(retry):
        delay = duration_pb2.Duration()
        delay.FromNanoseconds(max(0, math.ceil(retry * 1e9)))
        details.append(error_details_pb2.RetryInfo(retry_delay=delay))
    packed = []
    for message in details:
        holder = any_pb2.Any()
        holder.Pack(message)
        packed.append(holder)
    return status_pb2.Status(code=code_pb2.UNAVAILABLE, message=str(error), details=packed)


def rejection_rpc_status(error: CircuitOpenError) -> grpc.Status:
    """The same as a `grpc.Status` (code, details, `grpc-status-details-bin` trailer)."""
    return rpc_status.to_status(rejection_status(error))


@dataclass(frozen=True, slots=True)
class RejectionDetails:
    """What a client reads back from a rejected call's rich status."""

    breaker: str
    state: str
    retry_after: float | None  # None when forced open


def parse_rejection(call: Any) -> RejectionDetails | None:
    """The rejection carried by a failed call (`grpc.RpcError` or aio error), or None."""
    try:
        status = rpc_status.from_call(call)
    except ValueError:  # a trailer that does not match the call's code: not ours
        return None
    if status is None:
        return None
    info = None
    retry_after = None
    for holder in status.details:
        if holder.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            holder.Unpack(info)
        elif holder.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            holder.Unpack(retry)
            retry_after = retry.retry_delay.ToNanoseconds() / 1e9
    if info is None or info.domain != DOMAIN or info.reason not in _REASONS:
        return None
    meta = info.metadata
    name = meta.get("breaker") or meta.get("upstream", "")
    return RejectionDetails(name, str(pick(meta, contract.CIRCUIT_STATE, "")), retry_after)


_DETAILS_KEY = "grpc-status-details-bin"
_SIDECAR_REJECTION_KEY = "ccb-rejection-bin"  # the sidecar's `Call` refusal (sidecar/grpc/api.py)


def is_refusal(trailing_metadata: Any) -> bool:
    """True when a call's trailers say a breaker or sidecar of ours refused it (the rich error
    with our ErrorInfo, or the sidecar's `ccb-rejection-bin`): not a failure of the server.

    Trust: whoever answers can send these trailers; a client honours them from the servers it
    calls, as it honours their status codes."""
    for key, value in trailing_metadata or ():
        if key == _SIDECAR_REJECTION_KEY:
            return True
        if key != _DETAILS_KEY or not isinstance(value, bytes):
            continue
        status = status_pb2.Status()
        try:
            status.ParseFromString(value)
        except Exception:  # protobuf's DecodeError: not ours
            return False
        for holder in status.details:
            if holder.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                holder.Unpack(info)
                return bool(info.domain == DOMAIN and info.reason in _REASONS)
    return False
