"""A fleet member for the multi-process tests: one process, one RedisStore, one breaker.

Run as `python fleet_worker.py <mode> <redis-url> <namespace> <json settings>`. It prints JSON
lines on stdout ({"event": ...}) and takes one-word commands on stdin. Modes:

- watch:  report every state change as {"event": "state", "state", "at": monotonic time}
- probes: on "go", three threads call acquire() until the open wait is over and a second more,
          holding every permit; report the count
- calls:  call through the breaker until "stop"; report outcomes and anything unexpected
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
import time
from typing import Any

from cascadebreaker import CircuitBreaker, CircuitOpenError, Permit, RedisStore
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
    store = RedisStore.from_url(url, namespace=namespace)
    store.wait_ready(10.0)
    breaker = CircuitBreaker(NAME, store=store, **settings)

    def on_change(event: TransitionEvent) -> None:
        say(event="state", state=event.to_state.value, at=time.monotonic())

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


if __name__ == "__main__":
    sys.exit(main())
