"""URLs of the web demo."""

from __future__ import annotations

from django.urls import path, re_path

from cascadebreaker.demo.web.site import views
from cascadebreaker.demo.web.site.assets import ASSETS_URL

urlpatterns = [
    path("", views.home),
    path("reports/settlements", views.settlement_report, name="settlement-report"),
    path("api/settlements", views.settlements_json),
    path("healthz", views.healthz),
    re_path(rf"^{ASSETS_URL.strip('/')}/(?P<path>.+)$", views.asset),
]
