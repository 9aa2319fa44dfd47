"""RedisStore: breakers shared by every process and host using the same name and namespace.

Keys: one hash per breaker, ``ccb:<namespace>:<name>``, refreshed to expire after `key_ttl`.
On a Redis Cluster (`redis+cluster://host:port`, or a `RedisCluster` client) the key carries a
hash tag, ``ccb:{<namespace>:<name>}``, so every key a breaker's scripts will ever touch lands
in one slot; the channel is plain pub/sub, which a cluster broadcasts to every node.
Channel: ``ccb:<namespace>``, carrying state changes (and "a failure run started") as JSON.
Threads: one subscriber (redis_subscriber.py: keeps local views current, detects outages,
resynchronises) and one flusher (here: batched outcomes, urgent trips and probe results) per
store. Lua scripts live in lua/ (redis_scripts.py loads them); the slot is in redis_slot.py.
See docs/redis.md for the consistency model and failure behaviour.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import weakref
from collections import deque
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.exceptions import NoScriptError
from redis.retry import Retry

from ..core.config import BreakerConfig
from ..core.state import Outcome
from .base import Clock
from .quorum import NO_QUORUM_ARGS, FleetQuorum, default_instance
from .redis_scripts import REDIS_ERRORS, RemoteState, load_sources, ms
from .redis_slot import RedisSlot
from .redis_subscriber import Subscriber

log = logging.getLogger("cascadebreaker.redis")

_OUTCOME_CODES = {Outcome.SUCCESS: "S", Outcome.FAILURE: "F", Outcome.IGNORED: "I"}

Op = tuple[str, RedisSlot, tuple[Any, ...]]  # (script name, slot, script-specific args)

CLUSTER_SCHEME = "redis+cluster://"


def connect(url: str, socket_timeout: float) -> redis.Redis | RedisCluster:
    """A client for `url`: `redis://` (or rediss://, unix://) for one server,
    `redis+cluster://host:port` for a Redis Cluster reached through any of its nodes.

    Fail fast, no retries: a caller on the probe path must not wait out an outage (a cluster
    client re-reads the slot map after an error; the next call goes to the promoted node)."""
    options: dict[str, Any] = {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": socket_timeout,
        "retry": Retry(NoBackoff(), 0),
    }
    if url.startswith(CLUSTER_SCHEME):
        return RedisCluster.from_url("redis://" + url.removeprefix(CLUSTER_SCHEME), **options)
    return redis.Redis.from_url(url, **options)


class RedisStore:
    """Breaker state shared through Redis: atomic Lua transitions, local views kept current by
    pub/sub, outcomes reported in the background. Redis errors never reach the caller."""

    def __init__(
        self,
        client_or_url: redis.Redis | RedisCluster | str,
        namespace: str = "default",
        *,
        key_ttl: float = 86400.0,
        flush_interval: float = 0.005,
        probe_lease: float | None = None,
        half_open_poll: float = 0.05,
        max_pending: int = 10_000,
        socket_timeout: float = 0.25,
        heartbeat: float = 5.0,
        resync_interval: float = 30.0,
        quorum: FleetQuorum | None = None,
        instance: str | None = None,
    ) -> None:
        if not isinstance(namespace, str) or not namespace:
            raise ValueError(f"namespace must be a non-empty string, got {namespace!r}")
        for setting, value in (
            ("key_ttl", key_ttl),
            ("flush_interval", flush_interval),
            ("half_open_poll", half_open_poll),
            ("socket_timeout", socket_timeout),
            ("heartbeat", heartbeat),
            ("resync_interval", resync_interval),
        ):
            if not value > 0:
                raise ValueError(f"{setting} must be > 0, got {value!r}")
        if probe_lease is not None and not probe_lease > 0:
            raise ValueError(f"probe_lease must be > 0, got {probe_lease!r}")
        if max_pending < 1:
            raise ValueError(f"max_pending must be >= 1, got {max_pending!r}")
        if quorum is not None and not isinstance(quorum, FleetQuorum):
            raise ValueError(f"quorum must be a FleetQuorum, got {quorum!r}")
        if instance is not None and (
            not isinstance(instance, str) or not instance or "," in instance
        ):
            raise ValueError(f"instance must be a non-empty string without ',', got {instance!r}")
        if isinstance(client_or_url, str):
            client_or_url = connect(client_or_url, socket_timeout)
        self.client: Any = client_or_url  # redis.Redis or RedisCluster: the same commands
        self.cluster = isinstance(client_or_url, RedisCluster)
        self.namespace = namespace
        self.channel = f"ccb:{namespace}"
        self.key_ttl_ms = int(key_ttl * 1000)
        self.flush_interval = flush_interval
        self.probe_lease = probe_lease
        self.half_open_poll = half_open_poll
        self.max_pending = max_pending
        self.heartbeat = heartbeat  # silence on the subscription before a PING checks it
        self.resync_interval = resync_interval  # anti-entropy: re-read every breaker this often
        self.quorum = quorum
        self._own_instance = instance is None  # a generated id is renewed in a forked child
        self.instance = instance or default_instance()
        self.dropped = 0  # background messages dropped (queue full, or Redis down)
        self.flushes = 0  # flusher passes completed (diagnostics; tests wait on it)
        self.online = True
        self._scripts = {
            name: self.client.register_script(src) for name, src in load_sources().items()
        }
        self._slots: dict[str, RedisSlot] = {}
        self._slots_lock = threading.Lock()
        self._closed = False
        self._start_workers()
        _LIVE_STORES.add(self)

    def _start_workers(self) -> None:
        """Fresh queues, locks and threads (at start, and in a child process after fork)."""
        self._cond = threading.Condition()
        self._urgent: deque[Op] = deque()
        self._pending: set[RedisSlot] = set()
        self._subscribed = threading.Event()
        self._threads = [
            threading.Thread(target=Subscriber(self).run, name="ccb-redis-sub", daemon=True),
            threading.Thread(target=self._flush_loop, name="ccb-redis-flush", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _after_fork(self) -> None:
        # Threads do not survive fork and locks may have been held by them: start over, and
        # let the new subscriber resynchronise (redis-py's pool reconnects in the child itself).
        # A forked worker is another instance of the fleet: it votes under its own id.
        if self._own_instance:
            self.instance = default_instance()
        self._slots_lock = threading.Lock()
        for slot in self._slots.values():
            slot.lock = threading.Lock()
        if not self._closed:
            self._start_workers()

    @classmethod
    def from_url(cls, url: str, namespace: str = "default", **options: Any) -> RedisStore:
        """Connect to the Redis at `url` (redis://host:port/db)."""
        return cls(url, namespace, **options)

    # -- the Store protocol ------------------------------------------------------------------

    def key(self, name: str) -> str:
        """The Redis key of breaker `name` (hash-tagged on a cluster: one slot per breaker)."""
        if self.cluster:
            return f"ccb:{{{self.namespace}:{name}}}"
        return f"ccb:{self.namespace}:{name}"

    def pubsub(self) -> Any:
        """A fresh subscription connection. On a cluster, to a random node each time: every
        node hears every PUBLISH, and a node that just failed is not asked again and again."""
        if not self.cluster:
            return self.client.pubsub(ignore_subscribe_messages=True)
        import random

        nodes = self.client.get_nodes()
        return self.client.pubsub(node=random.choice(nodes), ignore_subscribe_messages=True)

    def slot(self, name: str, config: BreakerConfig, clock: Clock) -> RedisSlot:
        """Return the slot for `name`, joining the fleet's shared state on first use."""
        with self._slots_lock:
            existing = self._slots.get(name)
            if existing is not None:
                if existing.config != config:
                    log.warning(
                        "breaker %r already exists in this store; keeping its first settings", name
                    )
                return existing
            slot = self._slots[name] = RedisSlot(self, name, config, clock)
        if self.online:
            try:
                slot.resync()
            except REDIS_ERRORS as exc:
                self.mark_offline(exc)
        return slot

    def names(self) -> list[str]:
        """Names of the breakers held."""
        with self._slots_lock:
            return sorted(self._slots)

    def wait_ready(self, timeout: float = 5.0) -> bool:
        """Block until the subscriber listens (tests and start-up ordering); False on timeout."""
        return self._subscribed.wait(timeout)

    def close(self) -> None:
        """Flush what is queued (best effort), stop the threads and release connections."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=2.0)
        self.online = False  # closed: slots go on with local state, nothing touches Redis
        _LIVE_STORES.discard(self)
        with contextlib.suppress(*REDIS_ERRORS):
            self.client.close()

    # -- calls from slots --------------------------------------------------------------------

    def run_admit(self, slot: RedisSlot) -> RemoteState | None:
        """Ask Redis for admission off the closed path (inline); None when Redis is unreachable."""
        c = slot.config
        # The breaker's own probe_timeout wins; else the store's probe_lease; else the default.
        lease = c.probe_timeout if c.probe_timeout is not None else self.probe_lease
        lease = c.probe_lease if lease is None else lease
        cap = c.max_half_open_time or 0.0
        try:
            reply = self.run(
                "admit", slot, (c.half_open_max_calls, ms(lease), ms(cap), ms(slot.next_wait()))
            )
        except REDIS_ERRORS as exc:
            self.mark_offline(exc)
            return None
        return RemoteState.from_reply(reply)

    def quorum_args(self) -> tuple[str, int, float, int]:
        """The fleet-quorum arguments of trip.lua and report.lua."""
        return NO_QUORUM_ARGS if self.quorum is None else self.quorum.script_args(self.instance)

    def send_trip(self, slot: RedisSlot, reason: str, detail: str, failure: str) -> None:
        """Queue a local trip (with a quorum: a vote) for immediate push."""
        wait = ms(slot.next_wait())
        args = (slot.remote_version, wait, reason, 0, detail, failure, *self.quorum_args())
        self._urgent_op(("trip", slot, args))

    def send_probe(
        self,
        slot: RedisSlot,
        round_version: int,
        outcome: Outcome,
        slow: bool,
        ticket: int,
        failure: str,
    ) -> None:
        """Queue the outcome of the probe `ticket` of shared round `round_version`."""
        c = slot.config
        judging_slow = c.probe_slow_after is not None
        args = (
            round_version,
            _OUTCOME_CODES[outcome],
            int(slow),
            ticket,
            c.success_threshold,
            c.half_open_max_calls,
            c.half_open_failure_rate or 0,
            c.probe_slow_rate if judging_slow else 0,
            ms(slot.next_wait()),
            failure,
        )
        self._urgent_op(("probe", slot, args))

    def send_control(self, slot: RedisSlot, action: str) -> None:
        """Push a manual control action now (inline, so that once `reset()` returns no older
        shared state can flicker back); kept for the resync when Redis is unreachable."""
        if self.online:
            try:
                slot.apply(RemoteState.from_reply(self.run("control", slot, (action,))))
                return
            except REDIS_ERRORS as exc:
                self.mark_offline(exc)
        slot.pending_control = action

    def mark_pending(self, slot: RedisSlot) -> None:
        """Note that `slot` has batched outcomes to report."""
        with self._cond:
            if slot not in self._pending:
                self._pending.add(slot)
                if len(self._pending) == 1:
                    self._cond.notify()

    def _urgent_op(self, op: Op) -> None:
        with self._cond:
            if len(self._urgent) >= self.max_pending or self._closed:
                self.dropped += 1
                return
            self._urgent.append(op)
            self._cond.notify()

    def run(self, script: str, slot: RedisSlot, args: tuple[Any, ...]) -> Any:
        """Run one script for `slot` now; Redis errors propagate to the caller (the store)."""
        base = (slot.name, self.channel, self.key_ttl_ms)
        return self._scripts[script](keys=[slot.key], args=[*base, *args])

    # -- the flusher -------------------------------------------------------------------------

    def _flush_loop(self) -> None:
        while True:
            with self._cond:
                if not self._urgent and not self._closed:
                    watching = any(s.shared_dirty for s in self.slots_snapshot())
                    # With only batched work (or a fleet failure run to reset), let a batch form.
                    self._cond.wait(self.flush_interval if self._pending or watching else 1.0)
                urgent, self._urgent = list(self._urgent), deque()
                pending, self._pending = self._pending, set()
                closing = self._closed
            try:
                self._flush(urgent, pending)
            except Exception:  # the flusher must outlive any bug in one batch
                log.exception("cascadebreaker: Redis flush failed")
            self.flushes += 1
            if closing:
                return

    def _flush(self, urgent: list[Op], pending: set[RedisSlot]) -> None:
        watching = {s for s in self.slots_snapshot() if s.shared_dirty}
        if not self.online:
            self._park(urgent)
            for slot in pending | watching:
                slot.take_report()  # a failure count from before an outage is stale news
            return
        ops = list(urgent)
        for slot in pending | watching:
            report = slot.take_report()
            if report is not None:
                lead, had, tail, seen, failure = report
                wait = ms(slot.next_wait())
                args = (lead, int(had), tail, slot.threshold, wait, seen, failure)
                ops.append(("report", slot, (*args, *self.quorum_args())))
        ops += self._heartbeats()
        if not ops:
            return
        try:
            replies = self._pipeline(ops)
        except REDIS_ERRORS as exc:
            self.mark_offline(exc)
            self._park(urgent)
            return
        for (script, slot, _), reply in zip(ops, replies, strict=True):
            if isinstance(reply, Exception):
                log.error(
                    "cascadebreaker: Redis script %s failed for %r: %s", script, slot.name, reply
                )
                continue
            slot.apply(RemoteState.from_reply(reply))

    def _heartbeats(self) -> list[Op]:
        """With a quorum judged by a fraction: say which breakers this instance used lately."""
        quorum = self.quorum
        if quorum is None or not quorum.fraction:
            return []
        now = time.monotonic()
        every = quorum.window / 4
        return [
            ("seen", slot, (self.instance,))
            for slot in self.slots_snapshot()
            if slot.due_heartbeat(now, every)
        ]

    def _pipeline(self, ops: list[Op]) -> list[Any]:
        """Run `ops` in one round trip. EVALSHA directly: redis-py's Script objects would add a
        SCRIPT EXISTS round trip to every pipeline."""
        replies = self._evalsha_all(ops)
        missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if missing:  # Redis restarted or flushed its scripts; those ops did not run
            for script in self._scripts.values():
                self.client.script_load(script.script)
            for i, reply in zip(missing, self._evalsha_all([ops[i] for i in missing]), strict=True):
                replies[i] = reply
        return replies

    def _evalsha_all(self, ops: list[Op]) -> list[Any]:
        pipe = self.client.pipeline(transaction=False)
        for script, slot, args in ops:
            sha = self._scripts[script].sha
            # By name: a cluster pipeline blocks its evalsha() helper, not the command (it
            # routes each one by its key's slot).
            pipe.execute_command(
                "EVALSHA", sha, 1, slot.key, slot.name, self.channel, self.key_ttl_ms, *args
            )
        replies: list[Any] = pipe.execute(raise_on_error=False)
        return replies

    def _park(self, ops: list[Op]) -> None:
        """Redis is down: keep what must survive the outage on the slots, drop the rest."""
        for script, slot, _args in ops:
            if script == "trip":
                slot.pending_trip = True
            else:
                self.dropped += 1  # a probe result: the round is decided afresh after the outage

    # -- outages and recovery ----------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once `close()` was called."""
        return self._closed

    def find_slot(self, name: str) -> RedisSlot | None:
        """The slot of breaker `name`, if this store holds one."""
        return self._slots.get(name)

    def mark_subscribed(self) -> None:
        """The subscriber listens (see `wait_ready`)."""
        self._subscribed.set()

    def wake_flusher(self) -> None:
        """Let the flusher look at its work now rather than after its idle wait."""
        with self._cond:
            self._cond.notify()

    def recover(self) -> None:
        """(Re)connected: bring every slot in line with Redis, then go online."""
        for slot in self.slots_snapshot():
            slot.resync()
        if not self.online:
            self.online = True
            log.warning(
                "cascadebreaker: Redis reachable again; namespace %r resynchronised", self.namespace
            )

    def mark_offline(self, exc: BaseException) -> None:
        """Note an outage; logged once per outage, never per call."""
        if self.online:
            self.online = False
            log.warning(
                "cascadebreaker: Redis unreachable (%s); namespace %r continues on local state",
                exc,
                self.namespace,
            )

    def slots_snapshot(self) -> list[RedisSlot]:
        """Every slot, as a list safe to iterate while others are added."""
        with self._slots_lock:
            return list(self._slots.values())


_LIVE_STORES: weakref.WeakSet[RedisStore] = weakref.WeakSet()


def _restart_after_fork() -> None:
    for store in list(_LIVE_STORES):
        store._after_fork()


os.register_at_fork(after_in_child=_restart_after_fork)
