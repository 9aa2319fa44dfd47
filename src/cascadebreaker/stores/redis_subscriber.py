"""The subscriber thread of a RedisStore: keeps every local view current from pub/sub, notices
outages (a dropped connection, or a PING left unanswered), and resynchronises on reconnect."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from typing import TYPE_CHECKING, Any

from redis.exceptions import ConnectionError as RedisConnectionError

from .redis_scripts import REDIS_ERRORS, RemoteState

if TYPE_CHECKING:
    from .redis import RedisStore

log = logging.getLogger("cascadebreaker.redis")


class Subscriber:
    """Listens on the store's namespace channel."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self.malformed = 0  # messages that could not be read (logged once)

    def run(self) -> None:
        """The thread's body: (re)subscribe, resynchronise, apply messages, until closed."""
        delay = 0.05
        while not self.store.closed:
            pubsub: Any = None
            try:
                pubsub = self.store.pubsub()
                pubsub.subscribe(self.store.channel)
                self.store.recover()  # messages may have been missed while not subscribed
                self.store.mark_subscribed()
                delay = 0.05
                self._listen(pubsub)
            except REDIS_ERRORS as exc:
                self.store.mark_offline(exc)
            except Exception:  # a bug must not leave every local view stale for good
                log.exception("cascadebreaker: Redis subscriber failed; reconnecting")
            finally:
                _close_quietly(pubsub)
            if not self.store.closed:
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _listen(self, pubsub: Any) -> None:
        """Apply messages until closed; raise when the subscription is lost."""
        last_heard = last_resync = time.monotonic()
        ping_sent: float | None = None
        while not self.store.closed:
            message = pubsub.get_message(timeout=0.2)
            now = time.monotonic()
            if now - last_resync > self.store.resync_interval:
                # Insurance against a message lost without a disconnect (a view that is forced
                # open or disabled never asks Redis on its own).
                for slot in self.store.slots_snapshot():
                    slot.resync(periodic=True)
                last_resync = now
            if message is not None:
                last_heard, ping_sent = now, None
                if message.get("type") == "message":
                    self._on_message(message["data"])
            elif not self.store.online:
                self.store.recover()  # the flusher saw an error but our connection is fine
            elif ping_sent is not None and now - ping_sent > self.store.heartbeat:
                # A silent network drop leaves the socket looking open: call it lost.
                raise RedisConnectionError("no answer to PING on the subscription")
            elif ping_sent is None and now - last_heard > self.store.heartbeat:
                pubsub.ping()
                ping_sent = now

    def _on_message(self, data: bytes | str) -> None:
        try:
            message = json.loads(data)
            slot = self.store.find_slot(str(message["n"]))
            if slot is None:
                return
            if "c" in message:
                if not slot.threshold:
                    return  # no consecutive policy here: the count is not ours to reset
                slot.shared_dirty = True  # another process started a failure run:
                self.store.wake_flusher()  # start watching our successes now
            else:
                slot.apply(RemoteState.from_message(message))
        except (ValueError, KeyError, TypeError):
            self.malformed += 1
            if self.malformed == 1:  # once: a noisy publisher must not flood the log
                log.warning(
                    "cascadebreaker: ignoring malformed message(s) on %s: %r",
                    self.store.channel,
                    data,
                )


def _close_quietly(pubsub: Any) -> None:
    if pubsub is not None:
        with contextlib.suppress(*REDIS_ERRORS):
            pubsub.close()
