"""The upstream layer: keep-alive pools, the callback-level HTTP/1.1 exchange, a whole-response
client, and the error tree. No breaker here: deciding is the proxy's job.

    model.py       UpstreamTarget, UpstreamResponse, the UpstreamError tree
    connection.py  UpstreamConnection (one exchange at a time), ResponseSink
    pool.py        UpstreamPool, TimeoutWatch
    client.py      fetch (one buffered exchange), UpstreamClient
"""

from cascadebreaker.sidecar.upstream.client import UpstreamClient, fetch
from cascadebreaker.sidecar.upstream.connection import ResponseSink, UpstreamConnection
from cascadebreaker.sidecar.upstream.model import (
    UpstreamConnectError,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamReset,
    UpstreamResponse,
    UpstreamTarget,
    UpstreamTimeout,
)
from cascadebreaker.sidecar.upstream.pool import TimeoutWatch, UpstreamPool

__all__ = [
    "ResponseSink",
    "TimeoutWatch",
    "UpstreamClient",
    "UpstreamConnectError",
    "UpstreamConnection",
    "UpstreamError",
    "UpstreamPool",
    "UpstreamProtocolError",
    "UpstreamReset",
    "UpstreamResponse",
    "UpstreamTarget",
    "UpstreamTimeout",
    "fetch",
]
