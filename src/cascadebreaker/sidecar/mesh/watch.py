"""Event-driven propagation between sidecars over the gRPC `Watch` stream.

- `WatchHub` is the server side: every subscriber (a caller's sidecar) first gets the current
  state of our endpoints (`AvailabilityTable.current(since_version)`), then every update we send.
- `PeerWatchers` is the client side: one subscription per peer sidecar, opened the first time
  our app talks to that peer (its address comes from the `ccb-sidecar-grpc` response header or
  the config), reconnecting with backoff and asking only for what it missed (`since_version`).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import TYPE_CHECKING, Any

from cascadebreaker.cascade import AvailabilityUpdate, Verdict, is_loopback
from cascadebreaker.sidecar.logs import RateLimitedLog
from cascadebreaker.sidecar.proxy.ports import WatchEnded

if TYPE_CHECKING:
    from cascadebreaker.sidecar.proxy.ports import WatchSubscription

__all__ = ["PeerWatchers", "WatchHub", "peer_host"]

log = logging.getLogger("cascadebreaker.sidecar.cascade")

_QUEUE_LIMIT = 4096  # a subscriber this far behind is cut off; it reconnects with since_version
MAX_PEERS = 256  # Watch streams we hold to other sidecars
MAX_SUBSCRIBERS = 1024  # Watch streams other sidecars hold to us
# Updates that prove nothing about the peer's sequence: they never move `since_version` (a
# forged huge version would otherwise make every reconnect skip what it missed).
_UNTRUSTED = frozenset(
    {
        Verdict.MALFORMED,
        Verdict.UNSIGNED,
        Verdict.BAD_SIGNATURE,
        Verdict.FUTURE_VERSION,
        Verdict.WRONG_PEER,
    }
)
_refusals = RateLimitedLog(log, logging.WARNING)
_SHUTDOWN = "sidecar shutting down: reconnect with since_version = the last version received"
_BEHIND = "subscriber too far behind: reconnect with since_version = the last version received"
_BACKOFF_FIRST = 0.05
_BACKOFF_MAX = 2.0
_HELD = 1.0  # a stream open this long counts as a working connection
_GIVE_UP = 600.0  # seconds without a working connection before a peer is forgotten


def peer_host(peer: str) -> str:
    """The host of a gRPC peer string (`ipv4:127.0.0.1:5000`, `ipv6:[::1]:5000`)."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6":
        return rest.rpartition(":")[0].strip("[]")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    return rest


class WatchHub:
    """Fans our updates out to every subscribed caller's `Watch` stream."""

    def __init__(
        self, current: Callable[[int], list[AvailabilityUpdate]], *, loopback_only: bool
    ) -> None:
        self._current = current
        self._loopback_only = loopback_only
        self._subscribers: set[asyncio.Queue[AvailabilityUpdate | WatchEnded]] = set()
        self._closed = False

    @property
    def subscribers(self) -> int:
        """Open `Watch` streams."""
        return len(self._subscribers)

    def publish(self, updates: Iterable[AvailabilityUpdate]) -> None:
        """Queue updates for every subscriber (a hopelessly slow one is cut off)."""
        for queue in list(self._subscribers):
            for update in updates:
                if queue.qsize() >= _QUEUE_LIMIT - 1:
                    self._subscribers.discard(queue)
                    queue.put_nowait(WatchEnded(_BEHIND))  # the peer reconnects
                    break
                queue.put_nowait(update)

    async def source(self, subscription: WatchSubscription) -> AsyncIterator[AvailabilityUpdate]:
        """The `UpdateSource` plugged into the gRPC `Watch` method."""
        if self._loopback_only and not is_loopback(peer_host(subscription.peer)):
            _refusals("refused Watch from %s: no secret, loopback only", subscription.peer)
            return
        if len(self._subscribers) >= MAX_SUBSCRIBERS:
            _refusals("refused Watch from %s: %d streams open", subscription.peer, MAX_SUBSCRIBERS)
            return
        if self._closed:  # a Watch that arrived while we drain: the same answer as the others
            raise WatchEnded(_SHUTDOWN)
        wanted = frozenset(subscription.endpoints)
        queue: asyncio.Queue[AvailabilityUpdate | WatchEnded] = asyncio.Queue()
        self._subscribers.add(queue)  # before reading the state: nothing falls in between
        try:
            for update in self._current(subscription.since_version):
                if _wanted(update, wanted):
                    yield update
            while True:
                item = await queue.get()
                if isinstance(item, WatchEnded):
                    raise item
                if _wanted(item, wanted):
                    yield item
        finally:
            self._subscribers.discard(queue)

    def close(self) -> None:
        """End every stream (with UNAVAILABLE: the subscriber reconnects, to another replica or
        to us when we are back, with since_version)."""
        self._closed = True
        for queue in self._subscribers:
            queue.put_nowait(WatchEnded(_SHUTDOWN))
        self._subscribers.clear()


def _wanted(update: AvailabilityUpdate, wanted: frozenset[str]) -> bool:
    return not wanted or f"{update.endpoint.method} {update.endpoint.template}" in wanted


Receiver = Callable[[AvailabilityUpdate, str], Verdict]
"""Gets each update received from a peer, with the peer's address; returns the verdict."""


class PeerWatchers:
    """Our subscriptions to other sidecars' `Watch` streams, one task per peer address."""

    def __init__(
        self,
        service: str,
        receive: Receiver,
        *,
        loopback_only: bool,
        on_malformed: Callable[[], None] | None = None,
        on_forget: Callable[[str], None] | None = None,
        open_channel: Callable[[str], Any] | None = None,
    ) -> None:
        self.service = service
        # `GrpcTls.secure_channel` when TLS is configured, else plaintext (None: grpc, ~20 MB,
        # is loaded with the first peer; a sidecar that never meets one never loads it).
        self._open_channel = open_channel
        self._on_forget = on_forget
        self._receive = receive
        self._loopback_only = loopback_only
        self._on_malformed = on_malformed
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.reconnects = 0

    @property
    def peers(self) -> list[str]:
        """Addresses we subscribe to."""
        return sorted(self._tasks)

    def ensure(self, address: str) -> bool:
        """Subscribe to the sidecar at `address` (once); False when refused."""
        if address in self._tasks:
            return True
        host = address.rpartition(":")[0].strip("[]")
        if self._loopback_only and not is_loopback(host):
            return False  # without a secret, peers are trusted on loopback only
        if len(self._tasks) >= MAX_PEERS:
            return False
        self._tasks[address] = asyncio.get_running_loop().create_task(self._follow(address))
        return True

    async def _follow(self, address: str) -> None:
        """Stay subscribed: reconnect with jittered backoff, resume from the last version."""
        import grpc

        from cascadebreaker.sidecar.grpc.client import watch_updates

        open_channel = self._open_channel or grpc.aio.insecure_channel
        since = 0
        delay = _BACKOFF_FIRST
        alive_at = time.monotonic()  # last sign of life: an update, or a stream that held
        while True:
            channel = open_channel(address)  # a new handshake: the newest certificates
            opened = time.monotonic()
            try:
                stream = watch_updates(channel, self.service, (), since, on_malformed=self._bad)
                async for update in stream:
                    alive_at = time.monotonic()
                    if self._receive(update, address) not in _UNTRUSTED:
                        since = max(since, update.version)
                # The server ended the stream (it is shutting down or cut us off): reconnect.
            except asyncio.CancelledError:
                raise
            except grpc.aio.AioRpcError as exc:
                log.debug("Watch %s: %s", address, exc.code())
            except Exception:
                log.exception("Watch %s failed", address)
            finally:
                await channel.close(None)
            now = time.monotonic()
            if now - opened >= _HELD:
                alive_at, delay = now, _BACKOFF_FIRST
            elif now - alive_at > _GIVE_UP:
                # Gone for good (scaled down, moved): forget it; its next answer re-subscribes.
                log.info("cascade: stopped watching %s (unreachable)", address)
                del self._tasks[address]
                if self._on_forget is not None:
                    self._on_forget(address)
                return
            self.reconnects += 1
            await asyncio.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, _BACKOFF_MAX)

    def _bad(self, message: object, error: Exception) -> None:
        if self._on_malformed is not None:
            self._on_malformed()

    def close(self) -> None:
        """Cancel every subscription."""
        for task in self._tasks.values():
            task.cancel()
        self._tasks.clear()
