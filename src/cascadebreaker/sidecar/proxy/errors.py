"""Why a call made from code (`SidecarRuntime.call`, the gRPC `Call`) did not reach an upstream.

    LookupError
    └── UnknownUpstream     no upstream of that name is configured
    Exception
    └── CallRejected        refused before the upstream (open circuit, a hook); `.rejection`

Failures of the upstream itself are the `UpstreamError` tree (upstream/model.py).
"""

from __future__ import annotations

from cascadebreaker.sidecar.proxy.hooks import Rejection

__all__ = ["CallRejected", "UnknownUpstream"]


class UnknownUpstream(LookupError):
    """No upstream of that name is configured."""

    def __init__(self, upstream: str) -> None:
        super().__init__(f"unknown upstream {upstream!r}")
        self.upstream = upstream


class CallRejected(Exception):
    """The call was refused before reaching the upstream (open circuit or a hook)."""

    def __init__(self, upstream: str, rejection: Rejection) -> None:
        super().__init__(f"{upstream}: {rejection.body.get('error', 'rejected')}")
        self.upstream = upstream
        self.rejection = rejection
