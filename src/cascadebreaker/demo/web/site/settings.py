"""Django settings of the web demo, built from the source config (no settings module on disk)."""

from __future__ import annotations

import secrets
from typing import Any

from cascadebreaker.demo.web.site import assets
from cascadebreaker.demo.web.source import SourceConfig


def django_settings(config: SourceConfig, *, debug: bool = False) -> dict[str, Any]:
    """The demo site: no database, signed-cookie sessions, Inertia, the breaker middleware."""
    return {
        "DEBUG": debug,
        "SECRET_KEY": secrets.token_urlsafe(32),
        "ALLOWED_HOSTS": ["127.0.0.1", "localhost", "[::1]", "testserver"],
        "ROOT_URLCONF": "cascadebreaker.demo.web.site.urls",
        "INSTALLED_APPS": ["inertia", "cascadebreaker.demo.web.site"],
        "MIDDLEWARE": [
            "cascadebreaker.demo.web.source.trace_context_middleware",
            "django.middleware.security.SecurityMiddleware",
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.middleware.csrf.CsrfViewMiddleware",
            "inertia.middleware.InertiaMiddleware",
            "cascadebreaker.integrations.django.CircuitOpenMiddleware",
        ],
        "SESSION_ENGINE": "django.contrib.sessions.backends.signed_cookies",
        "TEMPLATES": [
            {"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True}
        ],
        "DATABASES": {},
        "USE_TZ": True,
        "INERTIA_LAYOUT": "ccb_demo_web/layout.html",
        "INERTIA_VERSION": assets.load().version,
        "CCB_DEMO_WEB": config.to_json(),
        "LOGGING": {
            "version": 1,
            "disable_existing_loggers": False,
            "handlers": {"console": {"class": "logging.StreamHandler"}},
            "root": {"handlers": ["console"], "level": "WARNING"},
        },
    }


def configure(config: SourceConfig, *, debug: bool = False) -> None:
    """Configure Django for this process (once) and set up its apps."""
    import django
    from django.conf import settings

    settings.configure(**django_settings(config, debug=debug))
    django.setup()
