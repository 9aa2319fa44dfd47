"""A fleet member for the multi-process tests: one process, one RedisStore, one breaker.

Run as `python fleet_worker.py <mode> <redis-url> <namespace> <json settings>`. It prints JSON
lines on stdout ({"event": ...}) and takes one-word commands on stdin. Modes:

- watch:  report every state change as {"event": "state", "state", "at": monotonic time}
- probes: on "go", three threads call acquire() until the open wait is over and a second more,
          holding every permit; report the count
- calls:  call through the breaker until "stop"; report outcomes and anything unexpected
- route:  call through the breaker until "stop"; the upstream fails while this replica's route is
          broken ("break" / "fix"); report the first rejection after a break (its time, scope,
          and the failed calls before it), the first rejection by the fleet's shared circuit,
          and on "stop" the counts
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
import time
from typing import Any

from cascadebreaker import CircuitBreaker, CircuitOpenError, FleetQuorum, Permit, RedisStore, Scope
from cascadebreaker.events import TransitionEvent

NAME = "fleet-upstream"


class CountingHandler(logging.Handler):
    """Counts log records, to check an outage is logged once."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def say(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def main() -> int:
    mode, url, namespace, raw = sys.argv[1:5]
    settings: dict[str, Any] = json.loads(raw)
    logs = CountingHandler()
    logging.getLogger("cascadebreaker").addHandler(logs)
    quorum = settings.pop("quorum", None)
    store = RedisStore.from_url(
        url, namespace=namespace, quorum=None if quorum is None else FleetQuorum(**quorum)
    )
    store.wait_ready(10.0)
    breaker = CircuitBreaker(NAME, store=store, **settings)

    def on_change(event: TransitionEvent) -> None:
        say(event="state", state=event.to_state.value, scope=event.scope.value, at=time.monotonic())

    breaker.add_listener(on_change)
    say(event="ready", state=breaker.state.value)
    if mode == "watch":
        sys.stdin.readline()  # until told to stop
    elif mode == "probes":
        sys.stdin.readline()  # "go"
        admitted: list[Permit] = []
        deadline = time.monotonic() + float(settings.get("recovery_timeout", 0.2)) + 1.0

        def contend() -> None:
            while time.monotonic() < deadline:
                # Held, never finished: a probe that never ends keeps the circuit half-open.
                with contextlib.suppress(CircuitOpenError):
                    admitted.append(breaker.acquire())

        threads = [threading.Thread(target=contend) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        say(event="probes", admitted=len(admitted), probes=sum(p.probe for p in admitted))
        sys.stdin.readline()
    elif mode == "calls":
        run_calls(breaker, logs)
    elif mode == "route":
        run_route(breaker)
    store.close()
    return 0


def run_calls(breaker: CircuitBreaker, logs: CountingHandler) -> None:
    counts = {"ok": 0, "failed": 0, "rejected": 0}
    unexpected: list[str] = []
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    n = 0

    def upstream() -> int:
        if n % 10 == 9:
            raise LookupError("an occasional upstream failure")
        return n

    while not stop.is_set():
        n += 1
        try:
            breaker.call(upstream)
            counts["ok"] += 1
        except LookupError:
            counts["failed"] += 1
        except CircuitOpenError:
            counts["rejected"] += 1
        except Exception as exc:  # anything else (a Redis error above all) is a bug
            unexpected.append(repr(exc))
        time.sleep(0.0005)
    say(
        event="calls",
        counts=counts,
        unexpected=unexpected,
        logs=logs.messages,
        state=breaker.state.value,
    )


def run_route(breaker: CircuitBreaker) -> None:
    counts = {"ok": 0, "failed": 0, "rejected": 0}
    broken = threading.Event()
    stop = threading.Event()
    since_break = {"failed": 0, "rejected": False, "shared": False}

    def commands() -> None:
        for line in sys.stdin:
            word = line.strip()
            if word == "break":
                since_break.update(failed=0, rejected=False, shared=False)
                broken.set()
            elif word == "fix":
                broken.clear()
            elif word == "stop":
                break
        stop.set()

    def upstream() -> str:
        if broken.is_set():
            raise ConnectionError("no route to host")
        return "ok"

    threading.Thread(target=commands, daemon=True).start()
    while not stop.is_set():
        try:
            breaker.call(upstream)
            counts["ok"] += 1
        except ConnectionError:
            counts["failed"] += 1
            since_break["failed"] += 1
        except CircuitOpenError as exc:
            counts["rejected"] += 1
            if broken.is_set() and not since_break["rejected"]:
                since_break["rejected"] = True
                say(
                    event="rejecting",
                    at=time.monotonic(),
                    scope=exc.scope.value,
                    failed_before=since_break["failed"],
                )
            if broken.is_set() and exc.scope is Scope.SHARED and not since_break["shared"]:
                since_break["shared"] = True
                say(event="shared", at=time.monotonic())
        time.sleep(0.002)
    snapshot = breaker.snapshot()
    say(event="route", counts=counts, state=snapshot.state.value, scope=snapshot.scope.value)


if __name__ == "__main__":
    sys.exit(main())
