"""The web demo's views: the Inertia report page, a JSON API, health, and the built assets."""

from __future__ import annotations

import datetime
import functools
from typing import Any

import httpx
from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.shortcuts import redirect
from django.views.static import serve
from inertia import render

from cascadebreaker.demo.web import ledger
from cascadebreaker.demo.web.site import assets
from cascadebreaker.demo.web.source import SettlementSource, SourceConfig

COMPONENT = "Reports/Settlements"


@functools.cache
def _source(config: SourceConfig) -> SettlementSource:
    return SettlementSource(config)


def settlement_source() -> SettlementSource:
    """The process's settlement source for the configured API (one breaker per process)."""
    return _source(SourceConfig(**settings.CCB_DEMO_WEB))


def _day(request: HttpRequest) -> datetime.date | None:
    raw = request.GET.get("day")
    if not raw:
        return datetime.date.today()
    try:
        return datetime.date.fromisoformat(raw)
    except ValueError:
        return None


def settlement_report(request: HttpRequest) -> HttpResponse:
    """The report page: the summary from the app's own ledger, settlements through the breaker.

    Props are callables, so a partial reload (`only: ['settlements']`) runs the settlements call
    alone, and one naming other props never touches the settlement API.
    """
    day = _day(request)
    if day is None:
        return HttpResponseBadRequest("day must be YYYY-MM-DD")
    source = settlement_source()
    props: dict[str, Any] = {
        "day": day.isoformat(),
        "summary": lambda: ledger.summary(day),
        "settlements": source.prop(day),
    }
    return render(request, COMPONENT, props, template_data={"assets": assets.load()})


def settlements_json(request: HttpRequest) -> HttpResponse:
    """`/api/settlements`: plain JSON for non-Inertia clients.

    A rejected call is not caught here: CircuitOpenError reaches the middleware, which answers
    the contract's 503 with `retry-after`.
    """
    day = _day(request)
    if day is None:
        return JsonResponse(
            {"error": "bad_request", "detail": "day must be YYYY-MM-DD"}, status=400
        )
    source = settlement_source()
    try:
        rows = source.breaker.call(source.fetch, day)
    except httpx.HTTPError as exc:
        return JsonResponse({"error": "upstream_error", "detail": type(exc).__name__}, status=502)
    return JsonResponse({"day": day.isoformat(), "settlements": rows})


def home(_request: HttpRequest) -> HttpResponse:
    """`/` goes to the report."""
    return redirect("settlement-report")


def healthz(_request: HttpRequest) -> HttpResponse:
    """Liveness for the launcher."""
    return JsonResponse({"status": "ok", "service": "web"})


def asset(request: HttpRequest, path: str) -> HttpResponse:
    """A built asset; hashed names never change, so browsers may keep them for a year."""
    response: HttpResponse = serve(request, path, document_root=str(assets.ASSETS_DIR))
    if path.startswith("assets/"):
        response["Cache-Control"] = "public, max-age=31536000, immutable"
    return response
