"""RedisSlot: one breaker's local view of a shared Redis state.

The local machine answers the closed path with no I/O. Off the closed path, probe admission asks
Redis (atomic, fleet-wide). Outcomes, local trips, probe results and manual control travel to
Redis on the store's flusher thread; shared state comes back as script replies and pub/sub
messages, adopted only when newer than the last version seen.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..core.config import BreakerConfig
from ..core.policies import ConsecutiveFailures
from ..core.state import Admission, Mode, Outcome, State, Transition
from .base import BreakerSlot, Clock
from .redis_scripts import RemoteState, ms

if TYPE_CHECKING:
    from .redis import RedisStore

_ADMIT, _PROBE, _REJECT = Admission.ADMIT, Admission.PROBE, Admission.REJECT


class RedisSlot(BreakerSlot):
    """A breaker slot whose state is shared through Redis."""

    def __init__(self, store: RedisStore, name: str, config: BreakerConfig, clock: Clock) -> None:
        super().__init__(name, config, clock)
        self.store = store
        self.key = store.key(name)
        self.remote_version = 0  # version of the last shared state adopted
        self.remote_opens = 0
        self.probe_round = 0  # version of the half-open round our probes belong to
        self.hold_until = 0.0  # fleet probe budget spent: reject locally until then
        self.fleet_probes = False  # the local half-open view's probe budget belongs to the fleet
        thresholds = [p.threshold for p in config.policies if isinstance(p, ConsecutiveFailures)]
        self.threshold = min(thresholds) if thresholds else 0  # 0: no shared failure count
        # Batched closed-path outcomes, guarded by self.lock (see report.lua for the meaning).
        self._lead = 0
        self._had_success = False
        self._tail = 0
        self._seen_successes = 0
        self.shared_dirty = False  # the fleet's failure count is above zero
        self.pending_trip = False  # a local trip Redis has not heard of (outage)
        self.pending_control: str | None = None

    # -- admission -------------------------------------------------------------------------

    def _local_decision(self, now: float) -> Admission | None:
        """Answer without Redis when the local view suffices; None means ask the fleet."""
        m = self.machine
        if m.mode is Mode.DISABLED:
            return _ADMIT
        if m.mode is Mode.FORCED_OPEN:
            return _REJECT
        if m.state is State.CLOSED:
            return _ADMIT
        if (m.state is State.OPEN and now < m.open_until) or now < self.hold_until:
            return _ADMIT if self.config.metrics_only else _REJECT
        return None

    def _admit_off_closed(self, now: float) -> Admission:
        local = self._local_decision(now)
        if local is not None:
            return local
        if not self.store.online:
            return self._admit_offline(now)
        before = self.machine.version
        remote = self.store.run_admit(self)
        if remote is None:
            return self._admit_offline(now)
        # The reply is the freshest shared state: re-apply it even at the same version, so a
        # local view that drifted (a trip whose push was dropped) cannot stay stale.
        self.apply(remote, resync_from=before)
        admission = remote.admission
        if admission is _PROBE:
            self.probe_round = remote.version
        elif admission is _REJECT:
            # Reject locally for a while instead of asking Redis on every call: until the shared
            # open wait ends, or briefly while the fleet's probes are out.
            hold = remote.remaining if remote.state is State.OPEN else 0.0
            if remote.state is State.HALF_OPEN:
                hold = min(remote.lease_remaining, self.store.half_open_poll)
            self.hold_until = self.clock() + hold
            if self.config.metrics_only:
                return _ADMIT
        return admission

    async def aadmit(self) -> Admission:
        """Async admission: local answers inline, fleet questions on a worker thread."""
        m = self.machine
        if m.state is State.CLOSED and m.mode is Mode.NORMAL:
            return _ADMIT
        now = self.clock()
        local = self._local_decision(now)
        if local is not None:
            return local
        if not self.store.online:
            return self._admit_offline(now)
        return await asyncio.to_thread(self._admit_off_closed, now)

    def _admit_offline(self, now: float) -> Admission:
        """Redis unreachable: the local machine decides, with a local probe budget."""
        if self.fleet_probes:
            with self.lock:
                self.fleet_probes = False
                if self.machine.state is State.HALF_OPEN:
                    self.machine.probes_admitted = 0
        return super()._admit_off_closed(now)

    # -- outcomes and transitions ------------------------------------------------------------

    def _after_outcome(self, outcome: Outcome, probe: bool, duration: float) -> None:
        if probe:
            if outcome is Outcome.IGNORED:
                self.hold_until = 0.0  # a slot was freed; let the next call ask the fleet
            self.store.send_probe(self, self.probe_round, outcome)
            return
        m = self.machine
        if not self.threshold or outcome is Outcome.IGNORED or m.mode is not Mode.NORMAL:
            return
        with self.lock:
            if m.state is not State.CLOSED:
                return
            if outcome is Outcome.FAILURE:
                if self._had_success:
                    self._tail += 1
                else:
                    self._lead += 1
            else:
                self._had_success = True
                self._tail = 0
        self.store.mark_pending(self)

    def _after_transitions(self, transitions: Iterable[Transition]) -> None:
        transitions = tuple(transitions)
        super()._after_transitions(transitions)
        for t in transitions:
            # Our own policy tripped a closed circuit: push it now, not with the next batch.
            closed_to_open = t.from_state is State.CLOSED and t.to_state is State.OPEN
            if closed_to_open and self.machine.mode is Mode.NORMAL:
                self.store.send_trip(self, t.reason)

    def _after_control(self, action: str) -> None:
        self.store.send_control(self, action)

    def take_report(self) -> tuple[int, bool, int, int] | None:
        """Drain the batched outcomes as (lead failures, had success, tail failures, version
        they were seen under), or None."""
        if not self.threshold:
            return None  # no consecutive policy here: nothing to count fleet-wide
        with self.lock:
            seen = self.remote_version
            fast = self.successes != self._seen_successes
            self._seen_successes = self.successes
            lead, had, tail = self._lead, self._had_success, self._tail
            self._lead = self._tail = 0
            self._had_success = False
        if fast:
            # Lock-free successes happen only outside a failure run: before the batch's failures
            # if it recorded no success, else before its tail. Either way they reset the count.
            tail = tail if had else lead
            lead, had = 0, True
        if not had and not lead:
            return None
        if had and not lead and not tail and not self.shared_dirty:
            return None  # successes, but the fleet count is already zero
        return lead, had, tail, seen

    def next_wait(self) -> float:
        """Open wait for the fleet's next opening (the backoff counts the shared openings)."""
        return self.config.backoff.delay(self.remote_opens + 1, self.machine.jitter())

    # -- adopting the shared state -----------------------------------------------------------

    def resync(self, periodic: bool = False) -> None:
        """Adopt the shared state, pushing first what the fleet missed while we were cut off.
        A periodic resync adopts only newer versions: the local view has not been cut off, and
        may be a moment ahead of Redis (a trip on its way)."""
        control, self.pending_control = self.pending_control, None
        pending_trip, self.pending_trip = self.pending_trip, False
        try:
            if control is not None:
                self.apply(RemoteState.from_reply(self.store.run("control", self, (control,))))
                control = None
            m = self.machine
            before = m.version
            remote = RemoteState.from_reply(self.store.run("read", self, ()))
            local_open = m.mode is Mode.NORMAL and m.state is not State.CLOSED
            if remote.state is State.CLOSED and (pending_trip or (remote.fresh and local_open)):
                # A trip the fleet never heard of (or a state Redis lost) is fresh news: push it.
                wait = max(0.0, m.open_until - self.clock()) if m.state is State.OPEN else 0.0
                reason = m.reason or "tripped while Redis was unreachable"
                remote = RemoteState.from_reply(
                    self.store.run("trip", self, (0, ms(wait), reason, 1))
                )
            pending_trip = False
            self.apply(remote, resync_from=None if periodic else before)
        except BaseException:
            # Still cut off: keep what was not delivered for the next attempt.
            self.pending_control = self.pending_control or control
            self.pending_trip = self.pending_trip or pending_trip
            raise

    def apply(self, remote: RemoteState, resync_from: int | None = None) -> None:
        """Adopt `remote` if it is newer than the last version adopted. A resync passes the local
        machine's version from before its read: an equal version is then re-applied too (the local
        view may have moved on its own during an outage), unless the machine moved meanwhile."""
        with self.lock:
            if remote.fails is not None:
                self.shared_dirty = remote.fails > 0 and self.threshold > 0
            known = self.remote_version
            force = resync_from is not None and resync_from == self.machine.version
            if remote.version < known or (remote.version == known and not force):
                return
            transitions = self._adopt_locked(remote)
        if transitions:
            BreakerSlot._after_transitions(self, transitions)  # listeners only: nothing to push

    def _adopt_locked(self, r: RemoteState) -> list[Transition]:
        m = self.machine
        now = self.clock()
        self.remote_version = r.version
        self.remote_opens = r.opens
        self.hold_until = 0.0
        self._lead = self._tail = 0
        self._had_success = False
        out: list[Transition] = []
        if r.mode is not m.mode:
            if r.mode is Mode.FORCED_OPEN:
                out += m.force_open(now)
            elif r.mode is Mode.DISABLED:
                out += m.disable(now)
            else:
                out += m.reset(now)
        if r.mode is Mode.NORMAL:
            m.version = min(m.version, r.version - 1)  # our local moves never outrank Redis
            out += m.adopt(now, r.state, r.version, r.remaining, r.reason, r.opens)
            self.fleet_probes = r.state is State.HALF_OPEN
        m.version = r.version
        self.dirty = False
        self._refresh_fast()
        return out
