"""Failure classification: which exceptions and results count against the upstream.

Kept apart from the trip policy (as linkerd2-proxy does): the classifier says what an outcome
*is*; the policy decides what a run of outcomes *means*.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from .state import Outcome

ExceptionPredicate = Callable[[BaseException], bool]
ResultPredicate = Callable[[Any], bool]

_MESSAGE_LIMIT: Final = 200  # a failure's message is for people; keep stores and payloads small


@dataclass(frozen=True, slots=True)
class FailureInfo:
    """A failure as a breaker remembers it: the exception type (or result type) and message."""

    type: str
    message: str

    @classmethod
    def of_exception(cls, exc: BaseException) -> FailureInfo:
        """Describe a raised exception."""
        return cls(type(exc).__name__, _clip(str(exc)))

    @classmethod
    def of_result(cls, value: object) -> FailureInfo:
        """Describe a returned value classified as a failure (an HTTP 503 response)."""
        return cls(type(value).__name__, _clip(repr(value)))

    @classmethod
    def parse(cls, text: str) -> FailureInfo | None:
        """Read the `describe()` form back (how shared stores carry it); None for ''."""
        if not text:
            return None
        kind, _, message = text.partition(": ")
        return cls(kind, message)

    def __reduce__(self) -> tuple[builtins.type[FailureInfo], tuple[str, str]]:
        """Pickle by the constructor: compiled by mypyc, the dataclass's own frozen `__setstate__`
        path fails (CircuitOpenError carries one across processes)."""
        return (FailureInfo, (self.type, self.message))

    def describe(self) -> str:
        """'Type: message', or just the type when there is no message."""
        return f"{self.type}: {self.message}" if self.message else self.type


def _clip(text: str) -> str:
    return text if len(text) <= _MESSAGE_LIMIT else text[: _MESSAGE_LIMIT - 1] + "…"


@dataclass(frozen=True, slots=True)
class Classifier:
    """Maps an exception or a result to an Outcome.

    Order for an exception: `ignore` types → IGNORED; `is_failure` predicate (when given) decides
    FAILURE or SUCCESS; `record` types → FAILURE; anything else → SUCCESS (the upstream answered,
    the caller's own error is not the upstream's fault), as resilience4j does.
    Cancellation and interpreter exits (BaseException that is not Exception) are IGNORED.
    """

    record: tuple[type[BaseException], ...] = (Exception,)
    ignore: tuple[type[BaseException], ...] = ()
    is_failure: ExceptionPredicate | None = None
    result_is_failure: ResultPredicate | None = None

    def __post_init__(self) -> None:
        for setting, types in (
            ("record_exceptions", self.record),
            ("ignore_exceptions", self.ignore),
        ):
            if not isinstance(types, tuple) or not all(
                isinstance(t, type) and issubclass(t, BaseException) for t in types
            ):
                raise ValueError(f"{setting} must be a tuple of exception types, got {types!r}")
        for setting, fn in (
            ("is_failure", self.is_failure),
            ("result_is_failure", self.result_is_failure),
        ):
            if fn is not None and not callable(fn):
                raise ValueError(f"{setting} must be callable, got {fn!r}")

    def exception(self, exc: BaseException) -> Outcome:
        """Classify a raised exception."""
        if not isinstance(exc, Exception):
            return Outcome.IGNORED
        if self.ignore and isinstance(exc, self.ignore):
            return Outcome.IGNORED
        if self.is_failure is not None:
            return Outcome.FAILURE if self.is_failure(exc) else Outcome.SUCCESS
        return Outcome.FAILURE if isinstance(exc, self.record) else Outcome.SUCCESS

    def result(self, value: object) -> Outcome:
        """Classify a returned value (e.g. an HTTP response with status >= 500 is a failure)."""
        if self.result_is_failure is not None and self.result_is_failure(value):
            return Outcome.FAILURE
        return Outcome.SUCCESS
