"""Error answers shared by the services."""

from __future__ import annotations

from fastapi.responses import JSONResponse

from cascadebreaker.demo.services.common import DownstreamError


def downstream_failure(exc: DownstreamError) -> JSONResponse:
    """Answer for a failed downstream call: 503 when refused (no work done), else 502/504."""
    if exc.refused:
        status, outcome = 503, "refused"
    else:
        status, outcome = (504 if exc.status == 504 else 502), "failed"
    return JSONResponse(
        {"status": outcome, "upstream": exc.upstream, "detail": exc.detail}, status_code=status
    )
