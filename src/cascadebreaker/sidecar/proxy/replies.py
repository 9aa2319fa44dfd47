"""Replies the sidecar makes itself: the open-circuit 503, upstream errors (502/504), and
exchanges with a ready answer."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from cascadebreaker.contract import parse_state, refusal_reason, rejection_body, whole_service
from cascadebreaker.sidecar.http.exchange import Exchange
from cascadebreaker.sidecar.http.wire import error_response
from cascadebreaker.sidecar.proxy.hooks import Rejection
from cascadebreaker.sidecar.proxy.refusals import seal

if TYPE_CHECKING:
    from cascadebreaker.sidecar.http.connection import ServerConnection
    from cascadebreaker.sidecar.http.exchange import RequestHead
    from cascadebreaker.sidecar.upstream.model import UpstreamError

__all__ = [
    "FixedExchange",
    "ReplyBuilder",
    "rejection_for_open_circuit",
    "upstream_error_reply",
]

ReplyBuilder = Callable[[bool], bytes]
"""Builds a complete response; the argument says whether it must close the connection."""

# A reply may wait for a request body this small to arrive (keeping the connection alive);
# bigger bodies get the reply at once and the connection closed.
_DEFER_BODY_LIMIT: Final = 65536


def rejection_for_open_circuit(upstream: str, error: Any, key: bytes | None = None) -> Rejection:
    """The 503 reply for an open breaker (from a CircuitOpenError): the contract's rejection
    body, its cause chain rooted at this breaker (as `Check` and `/availability` report it),
    its `ccb-refusal` mark sealed under `key` (the runtime's own: the reply goes to our app)."""
    retry_after: float | None = float(getattr(error, "retry_after", 0.0) or 0.0)
    if retry_after is not None and not math.isfinite(retry_after):
        retry_after = None  # forced open: no promise of when
    state = getattr(error, "state", "OPEN")
    reason = refusal_reason(str(getattr(error, "reason", "") or ""))
    # An endpoint's own breaker (`breaker.scope: endpoint`) is named `upstream METHOD /route`.
    name = str(getattr(error, "name", "") or upstream)
    root = name if " " in name else whole_service(upstream)
    body = rejection_body(
        error="circuit open",
        reason=reason,
        state=parse_state(getattr(state, "value", state)),
        retry_after=retry_after,
        cause_chain=[{"endpoint": root, "reason": reason.value}],
        upstream=upstream,
    )
    return Rejection(body, status=503, retry_after=retry_after, refusal=seal(key, reason.value))


_UPSTREAM_ERRORS: Final = {
    "timeout": "upstream timeout",
    "connect": "upstream unreachable",
    "reset": "upstream connection reset",
    "protocol": "bad upstream response",
}


def upstream_error_reply(upstream: str, error: UpstreamError) -> ReplyBuilder:
    """The 502/504 reply for an upstream that failed before its response head."""
    status = error.status
    message = _UPSTREAM_ERRORS.get(error.kind, "upstream error")
    detail = error.detail

    def build(close: bool) -> bytes:
        return error_response(status, message, close, upstream=upstream, detail=detail)

    return build


class FixedExchange(Exchange):
    """Answers with a ready response, after the (small) request body has been read."""

    __slots__ = ("_deferred", "conn", "finished", "request", "request_done")

    def __init__(
        self, conn: ServerConnection, request: RequestHead, reply: ReplyBuilder | None = None
    ) -> None:
        self.conn = conn
        self.request = request
        self.request_done = not request.has_body
        self.finished = False
        self._deferred: ReplyBuilder | None = reply

    def start(self) -> None:
        """Reply now if the request is complete (else at request_end)."""
        if self._deferred is not None:
            reply = self._deferred
            self._deferred = None
            self.reply(reply)

    def reply(self, build: ReplyBuilder) -> None:
        """Send a complete response, waiting for a small request body first."""
        self.finished = True
        if self.request_done:
            keep_alive = self.request.keep_alive and not self.conn.tracker.draining
            self.conn.write(build(not keep_alive))
            self.conn.response_done(self, keep_alive)
            return
        length = self.request.content_length
        if length is not None and int(length) <= _DEFER_BODY_LIMIT:
            self._deferred = build
        else:
            self.conn.write(build(True))
            self.conn.response_done(self, False)

    def request_body(self, data: bytes) -> None:
        """Discarded."""

    def request_end(self) -> None:
        """Send a reply that waited for the body."""
        self.request_done = True
        if self.finished and self._deferred is not None:
            build = self._deferred
            self._deferred = None
            self.reply(build)

    def downstream_writable(self, writable: bool) -> None:
        """Nothing streams."""

    def connection_lost(self) -> None:
        """Nothing to clean up."""
        self.finished = True
        self._deferred = None

    def request_failed(self, outcome: str) -> bool:
        """True unless the reply is already written."""
        written = self.finished and self._deferred is None
        self.finished = True
        self._deferred = None
        return not written
