"""Django middleware: a `CircuitOpenError` raised in a view becomes a 503 with `retry-after`.

    MIDDLEWARE = [
        ...,
        "cascadebreaker.integrations.django.CircuitOpenMiddleware",
    ]

Django turns an exception raised in a view into a 500 inside its own handler, so an outer ASGI or
WSGI wrapper never sees it: the rejection has to be caught by `process_exception`, which Django
calls for sync and async views (and for template responses rendered after the view). The answer
is the same 503 + JSON body as the ASGI middleware and the httpx transport's `on_open="respond"`
(built by `cascadebreaker.integrations.rejection`). Other exceptions are left to Django.

Inertia page routes should not rely on this: they answer 200 with guarded props
(`cascadebreaker.integrations.inertia`), since the Inertia client shows a 503 in an error modal.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponse

from ..errors import CircuitOpenError
from .rejection import rejection_body, rejection_headers

__all__ = ["CircuitOpenMiddleware", "rejection_response"]

GetResponse = Callable[[HttpRequest], Any]


def rejection_response(error: CircuitOpenError) -> HttpResponse:
    """The 503 of the contract for a rejected call: `retry-after` and the JSON body."""
    headers = rejection_headers(error)
    content_type = headers.pop("content-type")
    response = HttpResponse(rejection_body(error), status=503, content_type=content_type)
    for name, value in headers.items():
        response[name] = value
    return response


class CircuitOpenMiddleware:
    """Answer 503 + `retry-after` when a view raises CircuitOpenError; sync and async capable."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response
        # asgiref's test also sees middleware instances marked as coroutine functions.
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            # Django then runs this middleware in async mode, with no thread hop.
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponse | Awaitable[HttpResponse]:
        """Pass the request on (the work happens in `process_exception`)."""
        if self.is_async:
            return self._acall(request)
        response: HttpResponse = self.get_response(request)
        return response

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        response: HttpResponse = await self.get_response(request)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        """A rejection becomes the contract's 503; any other exception goes on to Django."""
        if isinstance(exception, CircuitOpenError):
            return rejection_response(exception)
        return None
