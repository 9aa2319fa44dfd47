"""Views of the protocol tests: optional and deferred guarded props with a counting upstream."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.urls import path
from inertia import render

from cascadebreaker import CircuitBreaker, MemoryStore
from cascadebreaker.integrations.inertia import guarded_deferred, guarded_optional

COMPONENT = "Reports/Lazy"


class CountingUpstream:
    """Counts how often the guarded prop really called its upstream."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> list[str]:
        self.calls += 1
        return ["stl_1", "stl_2"]


upstream = CountingUpstream()
breaker = CircuitBreaker("lazy-upstream", store=MemoryStore())


def lazy_report(request: HttpRequest) -> HttpResponse:
    props: dict[str, Any] = {
        "title": "lazy",
        "settlements": guarded_optional(breaker, upstream),
    }
    return render(request, COMPONENT, props)


def deferred_report(request: HttpRequest) -> HttpResponse:
    props: dict[str, Any] = {
        "title": "deferred",
        "settlements": guarded_deferred(breaker, upstream, group="slow"),
    }
    return render(request, COMPONENT, props)


urlpatterns = [
    path("lazy", lazy_report),
    path("deferred", deferred_report),
]
