"""Views of the middleware tests: sync and async, rejected by a breaker, failing, or fine."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.response import TemplateResponse
from django.urls import path

from cascadebreaker import CircuitBreaker, MemoryStore

# Opened by the tests (force_open, or real failures); reset between them.
breaker = CircuitBreaker(
    "ledger-api", failure_threshold=1, recovery_timeout=30.0, store=MemoryStore()
)


def _upstream() -> dict[str, str]:
    return {"ledger": "ok"}


async def _aupstream() -> dict[str, str]:
    return {"ledger": "ok"}


def sync_view(request: HttpRequest) -> HttpResponse:
    return JsonResponse(breaker.call(_upstream))


async def async_view(request: HttpRequest) -> HttpResponse:
    return JsonResponse(await breaker.acall(_aupstream))


def deep_view(request: HttpRequest) -> HttpResponse:
    # The rejection is raised far below the view, as from a client library.
    def repository() -> dict[str, str]:
        return breaker.call(_upstream)

    def service() -> dict[str, str]:
        return repository()

    return JsonResponse(service())


class _LazyBody(TemplateResponse):
    """Rendered after the view returned: Django's handler still routes its errors to middleware."""

    @property
    def rendered_content(self) -> str:
        return str(breaker.call(_upstream))


def template_view(request: HttpRequest) -> HttpResponse:
    return _LazyBody(request, "unused.html")


def broken_view(request: HttpRequest) -> HttpResponse:
    raise ValueError("a bug, not a breaker")


async def async_broken_view(request: HttpRequest) -> HttpResponse:
    raise ValueError("a bug, not a breaker")


urlpatterns = [
    path("sync", sync_view),
    path("async", async_view),
    path("deep", deep_view),
    path("template", template_view),
    path("broken", broken_view),
    path("async-broken", async_broken_view),
]
