"""Flask: a rejected call anywhere in a view becomes the JSON 503 with `retry-after`.

    from cascadebreaker.integrations.flask import CircuitBreakerExtension
    CircuitBreakerExtension(app)                 # or ext.init_app(app) in an app factory

The body and headers are the ones every surface sends (`integrations.rejection`). Only
`CircuitOpenError` is handled; every other error reaches Flask's own handlers unchanged.
"""

from __future__ import annotations

import flask

from ..errors import CircuitOpenError
from .rejection import rejection_body, rejection_headers

__all__ = ["CircuitBreakerExtension", "circuit_open_response"]


def circuit_open_response(error: CircuitOpenError) -> flask.Response:
    """The 503 response for a rejection (usable as a Flask error handler on its own)."""
    return flask.Response(rejection_body(error), status=503, headers=rejection_headers(error))


class CircuitBreakerExtension:
    """Registers the CircuitOpenError handler on an app (Flask's extension pattern)."""

    def __init__(self, app: flask.Flask | None = None) -> None:
        if app is not None:
            self.init_app(app)

    def init_app(self, app: flask.Flask) -> None:
        """Answer every CircuitOpenError a view raises with the JSON 503."""
        app.register_error_handler(CircuitOpenError, circuit_open_response)
        app.extensions["cascadebreaker"] = self
