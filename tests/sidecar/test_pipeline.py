"""The call pipeline's decisions in process, below the drivers: no sockets, a real runtime."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from cascadebreaker import Outcome, State
from cascadebreaker.sidecar.proxy.hooks import (
    BareCallHook,
    Direction,
    Rejection,
    RequestInfo,
    SettledCall,
)
from cascadebreaker.sidecar.proxy.pipeline import FAIL, REPLAY, RETRY, Call
from cascadebreaker.sidecar.proxy.runtime import SidecarRuntime
from cascadebreaker.sidecar.proxy.stats import RouteStats
from cascadebreaker.sidecar.schema import parse_config
from cascadebreaker.sidecar.upstream.model import UpstreamConnectError, UpstreamReset


@pytest.fixture
async def runtime() -> AsyncIterator[SidecarRuntime]:
    config = parse_config(
        {
            "service": "checkout",
            "listen": {"inbound": None},
            "upstreams": {
                "payment": {
                    "url": "http://127.0.0.1:9",
                    "breaker": {"failure_threshold": 1, "recovery_timeout": 30},
                    "retries": {"attempts": 2, "on_statuses": [503]},
                },
                "backup": {"url": "http://127.0.0.1:9"},
            },
            "cascade": {"enabled": False},
        }
    )
    runtime = SidecarRuntime(config)
    yield runtime
    runtime.close()


def _call(runtime: SidecarRuntime, method: bytes = b"GET", body: bool = False) -> Call:
    route = runtime.routes["payment"]
    return Call(Direction.OUTBOUND, route, method, b"/x", [], "127.0.0.1", body, not body)


def _holds_admission(call: Call) -> bool:
    return call.permit is not None or call.admitted != 0


class _Hook:
    def __init__(self, refuse: bool = False, reroute: str | None = None) -> None:
        self.refuse = refuse
        self.reroute = reroute
        self.heard: list[tuple[int, str]] = []

    def on_request(self, info: RequestInfo) -> Rejection | None:
        info.reroute = self.reroute
        return Rejection({"error": "no"}) if self.refuse else None

    def on_response(self, info: RequestInfo, status: int, outcome: str) -> None:
        self.heard.append((status, outcome))


async def test_a_hook_refusal_is_counted_and_heard(runtime: SidecarRuntime) -> None:
    hook = _Hook(refuse=True)
    runtime.hooks.add(hook)
    call = _call(runtime)
    verdict = runtime.pipeline.start(call)
    assert isinstance(verdict, Rejection) and verdict.body == {"error": "no"}
    assert call.permit is None and not call.admitted and call.closed
    assert runtime.routes["payment"].stats.outcomes["rejected"] == 1
    assert hook.heard == [(503, "rejected")]


async def test_a_hook_reroutes_to_a_configured_upstream_only(runtime: SidecarRuntime) -> None:
    runtime.hooks.add(_Hook(reroute="backup"))
    call = _call(runtime)
    assert runtime.pipeline.start(call) is None
    assert call.route.name == "backup" and _holds_admission(call)
    runtime.hooks.hooks[0] = _Hook(reroute="nowhere")
    other = _call(runtime)
    assert runtime.pipeline.start(other) is None
    assert other.route.name == "payment"


class _Line(SettledCall):
    """A hook's own state for a settled call (a Python subclass, also of the compiled class)."""

    def __init__(self, hook: BareCallHook, path: bytes) -> None:
        super().__init__(hook, b"x-settled: 1\r\n")
        self.path = path


class _Settler(BareCallHook):
    """Settles calls to /x (forwarding a header line; inbound, taking `x-mine` away), leaves
    every other one to on_request."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.settled: list[tuple[str, bytes, bytes]] = []  # (upstream or client, method, path)
        self.asked: list[str] = []  # the paths on_request saw
        self.heard: list[tuple[str, int, str, bool]] = []  # (upstream, status, outcome, settled)

    def settle(
        self, upstream: str, method: bytes, path: bytes, headers: list[tuple[bytes, bytes]]
    ) -> SettledCall | None:
        if self.fail:
            raise RuntimeError("a bug in the hook")
        if path != b"/x":
            return None
        self.settled.append((upstream, method, path))
        return _Line(self, path)

    def settle_inbound(
        self, method: bytes, path: bytes, headers: list[tuple[bytes, bytes]], client: str
    ) -> SettledCall | None:
        if self.fail:
            raise RuntimeError("a bug in the hook")
        if path != b"/x":
            return None
        self.settled.append((client, method, path))
        headers[:] = [(n, v) for n, v in headers if n != b"x-mine"]
        return _Line(self, path)

    def settled_response(
        self,
        upstream: str,
        settled: SettledCall,
        status: int,
        outcome: str,
        headers: list[tuple[bytes, bytes]],
    ) -> None:
        assert settled.hook is self and isinstance(settled, _Line) and settled.path == b"/x"
        self.heard.append((upstream, status, outcome, True))

    def on_request(self, info: RequestInfo) -> Rejection | None:
        self.asked.append(info.path)
        return None

    def on_response(self, info: RequestInfo, status: int, outcome: str) -> None:
        self.heard.append((info.target, status, outcome, False))


async def test_a_lone_bare_call_hook_settles_outbound_calls_without_a_request_info(
    runtime: SidecarRuntime,
) -> None:
    hook = _Settler()
    runtime.hooks.add(hook)
    pipeline = runtime.pipeline
    call = _call(runtime)
    assert pipeline.start(call) is None
    assert call.info is None and call.settled is not None
    assert call.settled.lines == b"x-settled: 1\r\n" and _holds_admission(call)
    assert (hook.settled, hook.asked) == ([("payment", b"GET", b"/x")], [])
    assert pipeline.response(call, 200, []) is False
    assert hook.heard == [("payment", 200, "success", True)]
    # A call it leaves gets a RequestInfo and on_request, and its outcome on_response.
    other = Call(Direction.OUTBOUND, runtime.routes["backup"], b"GET", b"/y", [], "a", False, True)
    assert pipeline.start(other) is None
    assert other.info is not None and other.settled is None and hook.asked == ["/y"]
    pipeline.response(other, 500, [])
    assert hook.heard[-1] == ("backup", 500, "failure", False)


async def test_a_settled_call_s_every_outcome_reaches_its_hook(runtime: SidecarRuntime) -> None:
    hook = _Settler()
    runtime.hooks.add(hook)
    pipeline = runtime.pipeline
    failed = _call(runtime, b"POST")  # no retry for a POST: the error is its outcome
    assert pipeline.start(failed) is None
    assert pipeline.failed(failed, UpstreamConnectError("payment", "refused")) == FAIL
    breaker = runtime.routes["payment"].breaker
    assert breaker is not None and breaker.state is State.OPEN  # threshold 1
    refused = _call(runtime)
    verdict = pipeline.start(refused)  # settled by the hook, then refused by the breaker
    assert isinstance(verdict, Rejection) and refused.settled is not None
    assert hook.heard == [("payment", 502, "failure", True), ("payment", 503, "rejected", True)]


def _inbound(runtime: SidecarRuntime, path: bytes, headers: list[tuple[bytes, bytes]]) -> Call:
    route = runtime.routes["payment"]  # standing in for the app's route
    return Call(Direction.INBOUND, route, b"GET", path, headers, "10.0.0.7", False, True)


async def test_a_lone_bare_call_hook_settles_inbound_calls_through_settle_inbound(
    runtime: SidecarRuntime,
) -> None:
    hook = _Settler()
    runtime.hooks.add(hook)
    pipeline = runtime.pipeline
    call = _inbound(runtime, b"/x", [(b"x-mine", b"1"), (b"accept", b"*/*")])
    assert pipeline.start(call) is None
    assert call.info is None and isinstance(call.settled, _Line)
    assert call.headers == [(b"accept", b"*/*")]  # the hook took its own header away
    assert (hook.settled, hook.asked) == ([("10.0.0.7", b"GET", b"/x")], [])
    assert pipeline.response(call, 200, []) is False
    assert hook.heard == [("payment", 200, "success", True)]
    left = _inbound(runtime, b"/y", [(b"x-mine", b"1")])
    assert pipeline.start(left) is None
    assert left.info is not None and left.settled is None and hook.asked == ["/y"]
    assert left.headers == [(b"x-mine", b"1")]
    pipeline.response(left, 200, [])
    assert hook.heard[-1] == ("payment", 200, "success", False)


async def test_bare_calls_are_not_settled_beside_another_hook(runtime: SidecarRuntime) -> None:
    settler, other = _Settler(), _Hook()
    runtime.hooks.add(settler)
    runtime.hooks.add(other)  # two hooks: every one of them sees every call
    inbound = _inbound(runtime, b"/x", [(b"x-mine", b"1")])
    assert runtime.pipeline.start(inbound) is None
    assert inbound.settled is None and inbound.info is not None and settler.asked == ["/x"]
    assert inbound.headers == [(b"x-mine", b"1")]
    call = _call(runtime)
    assert runtime.pipeline.start(call) is None
    assert call.settled is None and settler.asked == ["/x", "/x"] and settler.settled == []
    runtime.pipeline.response(call, 200, [])
    assert other.heard == [(200, "success")]


async def test_a_bare_call_hook_that_settles_nothing_hears_every_call_through_on_request(
    runtime: SidecarRuntime,
) -> None:
    class Plain(BareCallHook):  # the base's `settle` settles none
        def __init__(self) -> None:
            self.heard: list[tuple[int, str]] = []

        def on_request(self, info: RequestInfo) -> Rejection | None:
            return None

        def on_response(self, info: RequestInfo, status: int, outcome: str) -> None:
            self.heard.append((status, outcome))

    hook = Plain()
    runtime.hooks.add(hook)
    for call in (_call(runtime), _inbound(runtime, b"/x", [])):
        assert runtime.pipeline.start(call) is None
        assert call.settled is None and call.info is not None
        runtime.pipeline.response(call, 200, [])
    assert hook.heard == [(200, "success")] * 2


async def test_a_hook_that_fails_to_settle_is_logged_and_asked_again(
    runtime: SidecarRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    hook = _Settler(fail=True)
    runtime.hooks.add(hook)
    call = _call(runtime)
    assert runtime.pipeline.start(call) is None
    assert call.settled is None and call.info is not None and hook.asked == ["/x"]
    assert "failed to settle a call" in caplog.text
    # Inbound as well (its log line is rate-limited with the one above: not asked for again).
    inbound = _inbound(runtime, b"/x", [(b"x-mine", b"1")])
    assert runtime.pipeline.start(inbound) is None
    assert inbound.settled is None and inbound.info is not None and hook.asked == ["/x", "/x"]
    assert inbound.headers == [(b"x-mine", b"1")]


async def test_an_open_breaker_refuses(runtime: SidecarRuntime) -> None:
    breaker = runtime.routes["payment"].breaker
    assert breaker is not None
    breaker.force_open()
    verdict = runtime.pipeline.start(_call(runtime))
    assert isinstance(verdict, Rejection)
    assert (verdict.status, verdict.body["circuitState"]) == (503, "OPEN")
    assert breaker.state is State.OPEN


async def test_a_retryable_status_is_retried_for_idempotent_calls_only(
    runtime: SidecarRuntime,
) -> None:
    pipeline = runtime.pipeline
    get = _call(runtime)
    assert pipeline.start(get) is None
    assert pipeline.response(get, 503, []) is True  # recorded, then retried
    breaker = runtime.routes["payment"].breaker
    assert breaker is not None and breaker.state is State.OPEN  # threshold 1
    post = _call(runtime, b"POST")
    post.route = runtime.routes["backup"]  # a closed breaker to be admitted by
    assert pipeline.start(post) is None
    assert pipeline.response(post, 503, []) is False


async def test_a_stale_connection_is_replayed_unrecorded_then_fails(
    runtime: SidecarRuntime,
) -> None:
    pipeline = runtime.pipeline
    call = _call(runtime)
    assert pipeline.start(call) is None
    stale = UpstreamReset("payment", "closed", reused=True)
    assert [pipeline.failed(call, stale) for _ in range(2)] == [REPLAY, REPLAY]
    assert _holds_admission(call)  # nothing recorded yet
    stats = runtime.routes["payment"].stats
    assert pipeline.failed(call, stale) == FAIL  # the third time it counts; no attempts left
    assert stats.outcomes["reset"] == 1


async def test_a_body_that_cannot_be_resent_is_never_replayed(runtime: SidecarRuntime) -> None:
    call = _call(runtime, b"PUT", body=True)
    assert runtime.pipeline.start(call) is None
    stale = UpstreamReset("payment", "closed", reused=True)
    assert runtime.pipeline.failed(call, stale) == FAIL  # a body: no retry either
    stats = runtime.routes["payment"].stats
    assert (stats.outcomes["reset"], stats.latency_count) == (1, 1)


async def test_a_client_that_left_gives_its_permit_back(runtime: SidecarRuntime) -> None:
    pipeline = runtime.pipeline
    call = _call(runtime)
    assert pipeline.start(call) is None
    assert _holds_admission(call)
    pipeline.cancelled(call)
    assert not _holds_admission(call)
    pipeline.cancelled(call)  # twice: counted once
    assert runtime.routes["payment"].stats.outcomes["cancelled"] == 1
    other = _call(runtime)
    assert pipeline.start(other) is None
    pipeline.client_failed(other, "client_timeout")
    assert runtime.routes["payment"].stats.outcomes["client_timeout"] == 1
    refused = UpstreamConnectError("payment", "refused")
    late = _call(runtime)
    assert pipeline.start(late) is None
    assert pipeline.failed(late, refused) == RETRY  # recorded: the breaker (threshold 1) opens
    verdict = pipeline.retry(late)
    assert isinstance(verdict, Rejection) and late.attempt == 1


async def test_a_closed_breaker_admits_without_a_permit_and_counts_every_outcome(
    runtime: SidecarRuntime,
) -> None:
    pipeline = runtime.pipeline
    route = runtime.routes["backup"]  # failure threshold 5 (the default), no retries
    breaker = route.breaker
    assert breaker is not None

    def call() -> Call:
        admitted = _call(runtime)
        admitted.route = route
        assert pipeline.start(admitted) is None
        assert _holds_admission(admitted)
        return admitted

    first = call()
    assert first.permit is None and first.admitted  # the lock-free closed path
    assert pipeline.response(first, 500, []) is False
    during_the_run = call()
    assert during_the_run.permit is not None  # a failure run: its success must be recorded
    assert pipeline.response(during_the_run, 500, []) is False
    for _ in range(2):  # a failure run of four, cut short by a success, then another
        assert pipeline.response(call(), 500, []) is False
    assert pipeline.response(call(), 200, []) is False
    for _ in range(4):
        assert pipeline.response(call(), 500, []) is False
    assert breaker.state is State.CLOSED  # 4 in a row, never 5: the success reset the run
    pipeline.cancelled(call())  # given back: ignored
    assert pipeline.response(call(), 500, []) is False  # the fifth in a row
    snapshot = breaker.snapshot()  # read afresh: the fifth failure tripped it
    assert snapshot.state is State.OPEN
    calls = snapshot.calls
    assert (calls.success, calls.failure, calls.ignored) == (1, 9, 1)


async def test_a_success_admitted_before_a_failure_still_ends_the_failure_run(
    runtime: SidecarRuntime,
) -> None:
    pipeline = runtime.pipeline
    route = runtime.routes["backup"]  # failure threshold 5 (the default)
    breaker = route.breaker
    assert breaker is not None
    calls = [_call(runtime) for _ in range(5)]
    for admitted in calls:
        admitted.route = route
        assert pipeline.start(admitted) is None
        assert admitted.permit is None and admitted.admitted  # all on the lock-free path
    early, *failing = calls
    for admitted in failing:  # four failures in a row land while `early` is in flight
        assert pipeline.response(admitted, 500, []) is False
    assert pipeline.response(early, 200, []) is False  # it ends the run
    assert breaker.snapshot().calls.success == 1
    for _ in range(4):
        late = _call(runtime)
        late.route = route
        assert pipeline.start(late) is None
        assert pipeline.response(late, 500, []) is False
    assert breaker.state is State.CLOSED  # four since the success, not eight in a row


async def test_a_closed_path_outcome_from_before_a_trip_changes_nothing(
    runtime: SidecarRuntime,
) -> None:
    pipeline = runtime.pipeline
    breaker = runtime.routes["payment"].breaker  # threshold 1
    assert breaker is not None
    early, failing = _call(runtime, b"POST"), _call(runtime, b"POST")
    assert pipeline.start(early) is None and pipeline.start(failing) is None
    assert pipeline.response(failing, 500, []) is False
    assert breaker.state is State.OPEN
    assert pipeline.response(early, 200, []) is False  # a round that is over: not a close
    assert breaker.state is State.OPEN
    assert breaker.snapshot().calls.success == 1


async def test_a_breaker_with_an_outcome_listener_admits_with_a_permit(
    runtime: SidecarRuntime,
) -> None:
    heard: list[Any] = []
    breaker = runtime.routes["backup"].breaker
    assert breaker is not None
    breaker.add_outcome_listener(heard.append)  # turns the lock-free path off
    call = _call(runtime)
    call.route = runtime.routes["backup"]
    assert runtime.pipeline.start(call) is None
    assert call.permit is not None and not call.admitted
    assert runtime.pipeline.response(call, 200, []) is False
    assert [event.outcome for event in heard] == [Outcome.SUCCESS]


def test_inbound_header_lines_are_made_once_per_caller_and_bounded(
    runtime: SidecarRuntime,
) -> None:
    """`x-forwarded-for` and `via` for the app: one ready block per caller address, the same
    object again for the next request; many addresses do not grow it without end."""
    first = runtime.inbound_lines("10.0.0.7")
    assert first == b"x-forwarded-for: 10.0.0.7\r\nvia: 1.1 checkout\r\n"
    assert runtime.inbound_lines("10.0.0.7") is first
    for n in range(5000):
        lines = runtime.inbound_lines(f"10.1.{n // 256}.{n % 256}")
        assert lines.startswith(f"x-forwarded-for: 10.1.{n // 256}.{n % 256}\r\n".encode())
    assert len(runtime._inbound_lines) <= 4096


async def test_finished_calls_land_in_their_latency_buckets(runtime: SidecarRuntime) -> None:
    """The histogram as `finish` counts it (inlined) equals `RouteStats.observe`'s."""
    pipeline = runtime.pipeline
    now = [0.0]
    pipeline.clock = lambda: now[0]
    durations = [0.0001, 0.0002, 0.003, 0.0001, 0.7, 0.7, 30.0, 0.0004]
    reference = RouteStats()
    for seconds in durations:
        call = _call(runtime)
        now[0] = 100.0
        assert pipeline.start(call) is None
        assert pipeline.response(call, 200, []) is False
        now[0] = 100.0 + seconds
        pipeline.finish(call)
        reference.observe(seconds)
    stats = runtime.routes["payment"].stats
    assert stats.latency_buckets == reference.latency_buckets
    assert sum(stats.latency_buckets) == stats.latency_count == len(durations)
    assert stats.latency_buckets[-1] == 1  # 30 s: past the last bound
