"""Multi-process tests on a real redis-server: real processes, each with its own RedisStore."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cascadebreaker import CircuitBreaker, RedisStore, State

from .conftest import eventually

pytestmark = [pytest.mark.redis, pytest.mark.slow]
WORKER = Path(__file__).with_name("fleet_worker.py")
NAME = "fleet-upstream"


class Member:
    """One fleet_worker.py process."""

    def __init__(self, mode: str, url: str, namespace: str, **settings: Any) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER), mode, url, namespace, json.dumps(settings)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def next_event(self, event: str, timeout: float = 10.0) -> dict[str, Any]:
        """Read lines until one reports `event`; the timeout is a deadline for a hung worker."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                raise AssertionError(f"worker exited ({self.process.poll()}) before {event!r}")
            message: dict[str, Any] = json.loads(line)
            if message["event"] == event:
                return message
        raise AssertionError(f"no {event!r} within {timeout}s")

    def state_event(self, state: str) -> dict[str, Any]:
        """The next state change to `state` (earlier changes are skipped)."""
        while True:
            message = self.next_event("state")
            if message["state"] == state:
                return message

    def send(self, command: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def finish(self) -> None:
        try:
            self.process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate()


@pytest.fixture
def members() -> Any:
    started: list[Member] = []
    yield started
    for member in started:
        if member.process.poll() is None:
            member.process.kill()
        member.process.communicate()


def test_probe_admission_is_exact_under_contention(
    redis_server: Any, namespace: str, members: list[Member]
) -> None:
    settings = {"failure_threshold": 1, "recovery_timeout": 0.3, "half_open_max_calls": 2}
    for _ in range(4):
        members.append(Member("probes", redis_server.url, namespace, **settings))
    for member in members:
        member.next_event("ready")
    store = RedisStore.from_url(redis_server.url, namespace=namespace)
    try:
        breaker = CircuitBreaker(NAME, store=store, **settings)
        with pytest.raises(ZeroDivisionError):
            breaker.call(lambda: 1 / 0)  # trip the fleet
        for member in members:
            member.state_event("OPEN")  # hammering starts only once every member saw the trip
        for member in members:
            member.send("go")
        results = [member.next_event("probes") for member in members]
    finally:
        store.close()
    for member in members:
        member.send("stop")
        member.finish()
    assert sum(r["admitted"] for r in results) == 2, results
    assert sum(r["probes"] for r in results) == 2, results


def test_trip_in_one_process_is_seen_by_the_others(
    redis_server: Any, namespace: str, members: list[Member], capsys: pytest.CaptureFixture[str]
) -> None:
    settings = {"failure_threshold": 1, "recovery_timeout": 30.0}
    for _ in range(3):
        members.append(Member("watch", redis_server.url, namespace, **settings))
    for member in members:
        member.next_event("ready")
    store = RedisStore.from_url(redis_server.url, namespace=namespace)
    delays: list[float] = []
    try:
        breaker = CircuitBreaker(NAME, store=store, **settings)
        for _ in range(30):
            tripped_at = time.monotonic()
            with pytest.raises(ZeroDivisionError):
                breaker.call(lambda: 1 / 0)
            # CLOCK_MONOTONIC is system-wide, so the members' timestamps compare with ours.
            delays += [m.state_event("OPEN")["at"] - tripped_at for m in members]
            breaker.reset()
            for member in members:
                member.state_event("CLOSED")
    finally:
        store.close()
    for member in members:
        member.send("stop")
        member.finish()
    assert len(delays) == 90 and all(d < 5.0 for d in delays)
    cuts = statistics.quantiles(delays, n=100, method="inclusive")
    with capsys.disabled():
        print(
            f"\ntrip visibility across processes (n={len(delays)}): "
            f"p50={cuts[49] * 1000:.2f} ms p99={cuts[98] * 1000:.2f} ms "
            f"max={max(delays) * 1000:.2f} ms"
        )


def test_redis_outage_mid_run(own_redis_server: Any, namespace: str, members: list[Member]) -> None:
    url = own_redis_server.url
    for _ in range(2):
        members.append(Member("calls", url, namespace, failure_threshold=1000))
    for member in members:
        member.next_event("ready")
    store = RedisStore.from_url(url, namespace=namespace)
    assert store.wait_ready()
    try:
        breaker = CircuitBreaker(NAME, store=store, failure_threshold=2, recovery_timeout=30.0)
        time.sleep(0.3)  # let the members call through a healthy Redis for a while
        own_redis_server.stop()
        eventually(lambda: not store.online, what="the outage is noticed")
        for _ in range(2):  # this process trips on its own while Redis is down
            with pytest.raises(ZeroDivisionError):
                breaker.call(lambda: 1 / 0)
        assert breaker.state is State.OPEN
        time.sleep(0.3)  # members keep calling with Redis down
        own_redis_server.start()  # empty: the restarted Redis lost every key
        eventually(lambda: store.online, timeout=10.0, what="resynchronised after restart")
        for member in members:
            member.state_event("OPEN")  # our trip during the outage was pushed to the fleet
        breaker.reset()
        for member in members:
            member.state_event("CLOSED")
    finally:
        store.close()
    reports = []
    for member in members:
        member.send("stop")
        reports.append(member.next_event("calls"))
        member.finish()
    for report in reports:
        assert report["unexpected"] == [], report
        assert report["counts"]["ok"] > 0
        unreachable = [m for m in report["logs"] if "unreachable" in m]
        assert len(unreachable) == 1, report["logs"]  # logged once, not per call
        assert report["state"] == "CLOSED"


def test_a_store_survives_fork(redis_server: Any, namespace: str) -> None:
    # Servers that load the app before forking workers (gunicorn --preload) fork after the
    # store's threads started; the child gets fresh threads and stays in the fleet.
    import multiprocessing

    store = RedisStore.from_url(redis_server.url, namespace=namespace)
    assert store.wait_ready()
    breaker = CircuitBreaker(NAME, failure_threshold=1, store=store)

    def child() -> None:
        with pytest.raises(ZeroDivisionError):
            breaker.call(lambda: 1 / 0)  # trips the fleet from the forked worker
        eventually(lambda: breaker.state is State.CLOSED, timeout=10.0, what="parent's reset")
        store.close()

    try:
        worker = multiprocessing.get_context("fork").Process(target=child)
        worker.start()
        eventually(lambda: breaker.state is State.OPEN, timeout=10.0, what="the child's trip")
        breaker.reset()
        worker.join(timeout=15)
        assert worker.exitcode == 0
    finally:
        store.close()


def route_fleet(url: str, namespace: str, count: int, **settings: Any) -> list[Member]:
    fleet = [Member("route", url, namespace, **settings) for _ in range(count)]
    for member in fleet:
        member.next_event("ready")
    return fleet


def stop_all(fleet: list[Member]) -> list[dict[str, Any]]:
    for member in fleet:
        member.send("stop")
    reports = [member.next_event("route") for member in fleet]
    for member in fleet:
        member.finish()
    return reports


@pytest.mark.parametrize("quorum", [None, {"reporters": 2}], ids=["no-quorum", "quorum"])
def test_one_replica_with_a_broken_route(
    redis_server: Any, namespace: str, members: list[Member], quorum: dict[str, Any] | None
) -> None:
    settings: dict[str, Any] = {"failure_threshold": 5, "recovery_timeout": 30.0}
    if quorum is not None:
        settings["quorum"] = quorum
    fleet = route_fleet(redis_server.url, namespace, 3, **settings)
    members.extend(fleet)
    sick = fleet[0]
    sick.send("break")
    first = sick.next_event("rejecting")
    assert first["failed_before"] <= 5
    time.sleep(0.5)  # the healthy replicas keep calling meanwhile
    reports = stop_all(fleet)
    if quorum is None:
        # Without a quorum the sick replica's trip opens the shared circuit: the healthy
        # replicas lose an upstream they could reach (the failure mode the quorum is for).
        assert first["scope"] == "shared"
        assert all(r["counts"]["rejected"] > 0 for r in reports[1:]), reports
        return
    assert first["scope"] == "local"
    assert reports[0]["state"] == "OPEN" and reports[0]["scope"] == "local", reports[0]
    for report in reports[1:]:
        assert report["counts"]["rejected"] == 0, report
        assert report["counts"]["ok"] > 0 and report["state"] == "CLOSED", report
        assert report["scope"] == "shared", report


def test_a_real_outage_trips_every_replica_as_fast_with_a_quorum(
    redis_server: Any, namespace: str, members: list[Member], capsys: pytest.CaptureFixture[str]
) -> None:
    threshold = 5
    results: dict[str, tuple[list[int], list[float], list[float]]] = {}
    for label, quorum in (("no quorum", None), ("quorum of 2", {"reporters": 2})):
        settings: dict[str, Any] = {"failure_threshold": threshold, "recovery_timeout": 30.0}
        if quorum is not None:
            settings["quorum"] = quorum
        fleet = route_fleet(redis_server.url, f"{namespace}-{len(results)}", 3, **settings)
        members.extend(fleet)
        outage = time.monotonic()
        for member in fleet:
            member.send("break")
        rejecting = [member.next_event("rejecting") for member in fleet]
        shared = [member.next_event("shared") for member in fleet]  # the fleet's circuit opened
        stop_all(fleet)
        # Calls that reached the dead upstream before each replica stopped calling it: the
        # quorum must not let more through than the replica's own threshold.
        failed = [r["failed_before"] for r in rejecting]
        assert all(n <= threshold for n in failed), (label, failed)
        results[label] = (
            failed,
            [r["at"] - outage for r in rejecting],
            [s["at"] - outage for s in shared],
        )
    with capsys.disabled():
        print("\nreal outage, 3 replicas, threshold 5:")
        for label, (failed, first, everyone) in results.items():
            print(
                f"  {label:12} failed calls per replica {failed}; replicas rejecting after "
                f"max {max(first) * 1000:.0f} ms; shared circuit open for all after "
                f"max {max(everyone) * 1000:.0f} ms"
            )
