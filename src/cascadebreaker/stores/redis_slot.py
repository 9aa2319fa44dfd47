"""RedisSlot: one breaker's local view of a shared Redis state.

The local machine answers the closed path with no I/O. Off the closed path, probe admission asks
Redis (atomic, fleet-wide). Outcomes, local trips, probe results and manual control travel to
Redis on the store's flusher thread; shared state comes back as script replies and pub/sub
messages, adopted only when newer than the last version seen.

Rounds: the local machine's round moves with every local move and every adopted shared state.
A fleet probe is admitted in a *shared* round (the hash's version when it was admitted); the
slot remembers which local round stands for which shared round, so a probe's outcome is sent
with its own shared round and ticket, whatever the local view did meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..core.classify import FailureInfo
from ..core.config import BreakerConfig
from ..core.policies import ConsecutiveFailures
from ..core.state import Admission, Mode, Outcome, Scope, State, Transition
from .base import Admitted, BreakerSlot, Clock
from .redis_scripts import RemoteState, ms

if TYPE_CHECKING:
    from .redis import RedisStore

_ADMIT, _PROBE, _REJECT = Admission.ADMIT, Admission.PROBE, Admission.REJECT
_FLEET_ROUNDS_KEPT = 64  # local rounds remembered for probes still out


class RedisSlot(BreakerSlot):
    """A breaker slot whose state is shared through Redis."""

    def __init__(self, store: RedisStore, name: str, config: BreakerConfig, clock: Clock) -> None:
        super().__init__(name, config, clock)
        self.store = store
        self.key = store.key(name)
        self.remote_version = 0  # version of the last shared state adopted
        self.remote_opens = 0
        self.remote_probes = 0  # fleet-wide probes out, as last reported
        self.fleet_rounds: dict[int, int] = {}  # local round -> shared round of fleet probes
        self.hold_until = 0.0  # fleet probe budget spent: reject locally until then
        self.fleet_probes = False  # the local half-open view's probe budget belongs to the fleet
        thresholds = [p.threshold for p in config.policies if isinstance(p, ConsecutiveFailures)]
        self.threshold = min(thresholds) if thresholds else 0  # 0: no shared failure count
        # Batched closed-path outcomes, guarded by self.lock (see report.lua for the meaning).
        self._lead = 0
        self._had_success = False
        self._tail = 0
        self._seen_successes = 0
        self._batch_failure = ""
        self.shared_dirty = False  # the fleet's failure count is above zero
        self.pending_trip = False  # a local trip Redis has not heard of (outage)
        self.pending_control: str | None = None
        # With a fleet quorum: our own trip, not (yet) the fleet's. The local machine then decides
        # alone (its own open wait and probes) until it closes or the fleet's state moves on.
        self.local_trip = False
        self._beat_calls = 0
        self._beat_at = float("-inf")

    @property
    def scope(self) -> Scope:
        """SHARED while this view follows the fleet; LOCAL while Redis is unreachable or while a
        trip of ours has not reached the fleet quorum."""
        return Scope.LOCAL if self.local_trip or not self.store.online else Scope.SHARED

    def due_heartbeat(self, now: float, every: float) -> bool:
        """True when calls went through since the last heartbeat, at most once per `every` s."""
        calls = self.success_count() + self.failures
        if calls == self._beat_calls or now - self._beat_at < every:
            return False
        self._beat_calls, self._beat_at = calls, now
        return True

    def probes_out(self) -> int:
        """Fleet-wide probes out while half-open (as Redis last said), else 0."""
        if self.machine.state is not State.HALF_OPEN:
            return 0
        return self.remote_probes if self.fleet_probes else super().probes_out()

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

    def _admit_off_closed(self, now: float) -> Admitted:
        if self.local_trip:
            return super()._admit_off_closed(now)  # our own open wait and our own probes
        round_ = self.machine.round
        local = self._local_decision(now)
        if local is not None:
            return local, round_, 0
        if not self.store.online:
            return self._admit_offline(now)
        before = self.machine.version
        remote = self.store.run_admit(self)
        if remote is None:
            return self._admit_offline(now)
        # The reply is the freshest shared state: re-apply it even at the same version, so a
        # local view that drifted (a trip whose push was dropped) cannot stay stale.
        round_ = self.apply(remote, resync_from=before)
        admission = remote.admission
        if admission is _PROBE:
            self._remember_fleet_round(round_, remote.version)
            return _PROBE, round_, remote.ticket
        if admission is _REJECT:
            # Reject locally for a while instead of asking Redis on every call: until the shared
            # open wait ends, or briefly while the fleet's probes are out.
            hold = remote.remaining if remote.state is State.OPEN else 0.0
            if remote.state is State.HALF_OPEN:
                hold = min(remote.lease_remaining, self.store.half_open_poll)
            self.hold_until = self.clock() + hold
            if self.config.metrics_only:
                return _ADMIT, round_, 0
        return admission, round_, 0

    def _remember_fleet_round(self, local_round: int, shared_round: int) -> None:
        rounds = self.fleet_rounds
        rounds[local_round] = shared_round
        while len(rounds) > _FLEET_ROUNDS_KEPT:
            del rounds[next(iter(rounds))]

    async def aadmit(self) -> Admitted:
        """Async admission: local answers inline, fleet questions on a worker thread."""
        m = self.machine
        round_ = m.round
        if m.state is State.CLOSED and m.mode is Mode.NORMAL:
            return _ADMIT, round_, 0
        now = self.clock()
        if self.local_trip:
            return super()._admit_off_closed(now)
        local = self._local_decision(now)
        if local is not None:
            return local, round_, 0
        if not self.store.online:
            return self._admit_offline(now)
        return await asyncio.to_thread(self._admit_off_closed, now)

    def _admit_offline(self, now: float) -> Admitted:
        """Redis unreachable: the local machine decides, with a local probe budget."""
        if self.fleet_probes:
            with self.lock:
                self.fleet_probes = False
                if self.machine.state is State.HALF_OPEN:
                    self.machine.probes.start()  # the fleet's probes are not ours to wait for
        return super()._admit_off_closed(now)

    # -- outcomes and transitions ------------------------------------------------------------

    def _after_outcome(
        self,
        outcome: Outcome,
        probe: bool,
        duration: float,
        admitted_in: int,
        ticket: int,
        current: bool,
        failure: FailureInfo | None,
    ) -> None:
        if probe:
            shared_round = self.fleet_rounds.get(admitted_in)
            if shared_round is None:
                return  # a probe of a local round (Redis was unreachable): not the fleet's
            if outcome is Outcome.IGNORED:
                self.hold_until = 0.0  # a slot was freed; let the next call ask the fleet
            slow_after = self.config.probe_slow_after
            slow = slow_after is not None and duration >= slow_after
            text = failure.describe() if failure is not None else ""
            self.store.send_probe(self, shared_round, outcome, slow, ticket, text)
            return
        m = self.machine
        if not current or not self.threshold or outcome is Outcome.IGNORED:
            return  # a call from an earlier round, or nothing the fleet's count cares about
        if m.mode is not Mode.NORMAL:
            return
        with self.lock:
            if m.state is not State.CLOSED:
                return
            if outcome is Outcome.FAILURE:
                if failure is not None:
                    self._batch_failure = failure.describe()
                if self._had_success:
                    self._tail += 1
                else:
                    self._lead += 1
            else:
                self._had_success = True
                self._tail = 0
        self.store.mark_pending(self)

    def _after_transitions(self, transitions: Iterable[Transition]) -> None:
        # Moves of the local machine (adopted shared states go to the listeners directly).
        transitions = tuple(transitions)
        quorum = self.store.quorum is not None
        votes = []
        for t in transitions:
            # Our own policy tripped a closed circuit: push it now, not with the next batch.
            # With a quorum it is a vote, and so is every reopening of our own local trip.
            tripped = t.from_state is State.CLOSED and t.to_state is State.OPEN
            reopened = self.local_trip and t.to_state is State.OPEN
            if (tripped or reopened) and self.machine.mode is Mode.NORMAL:
                votes.append(t)
                if quorum:
                    self.local_trip = True
            elif t.to_state is State.CLOSED:
                self.local_trip = False  # our own probes closed it: back with the fleet
        super()._after_transitions(transitions)
        for t in votes:
            self.store.send_trip(self, t.reason, t.detail, self._failure_text())

    def _failure_text(self) -> str:
        failure = self.last_failure
        return failure.describe() if failure is not None else ""

    def _after_control(self, action: str) -> None:
        self.store.send_control(self, action)

    def take_report(self) -> tuple[int, bool, int, int, str] | None:
        """Drain the batched outcomes as (lead failures, had success, tail failures, version
        they were seen under, last failure), or None."""
        if not self.threshold:
            return None  # no consecutive policy here: nothing to count fleet-wide
        with self.lock:
            seen = self.remote_version
            successes = self.success_count()
            fast = successes != self._seen_successes
            self._seen_successes = successes
            lead, had, tail = self._lead, self._had_success, self._tail
            failure, self._batch_failure = self._batch_failure, ""
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
        return lead, had, tail, seen, failure

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
                reason = m.reason or "consecutive_failures"
                detail = m.detail or "tripped while Redis was unreachable"
                quorum = self.store.quorum_args()
                args = (0, ms(wait), reason, 1, detail, self._failure_text(), *quorum)
                remote = RemoteState.from_reply(self.store.run("trip", self, args))
                if remote.state is State.CLOSED and self.store.quorum is not None:
                    self.local_trip = True  # a vote short of the quorum: stay open for us alone
                    return
            pending_trip = False
            if self.local_trip and remote.version <= self.remote_version:
                return  # the fleet did not move: our own trip stands
            self.apply(remote, resync_from=None if periodic else before, reading=True)
        except BaseException:
            # Still cut off: keep what was not delivered for the next attempt.
            self.pending_control = self.pending_control or control
            self.pending_trip = self.pending_trip or pending_trip
            raise

    def apply(
        self, remote: RemoteState, resync_from: int | None = None, reading: bool = False
    ) -> int:
        """Adopt `remote` if it is newer than the last version adopted; return the local round
        right after. A resync passes the local machine's version from before its read: an equal
        version is then re-applied too (the local view may have moved on its own during an
        outage), unless the machine moved meanwhile."""
        with self.lock:
            if remote.fails is not None:
                self.shared_dirty = remote.fails > 0 and self.threshold > 0
            self.remote_probes = remote.probes
            known = self.remote_version
            m = self.machine
            force = resync_from is not None and resync_from == m.version
            if remote.version < known or (remote.version == known and not force):
                return m.round
            if (
                reading
                and remote.version == known
                and remote.state is State.CLOSED
                and m.mode is Mode.NORMAL
                and m.state is not State.CLOSED
                and m.version > known
            ):
                # A plain read (not an admission's reply) and our own trip since the last
                # adoption, not yet answered (queued for the flusher, or about to be): newer
                # than this read, which would reopen the circuit. A lost trip is corrected by
                # the next admission, whose reply is re-applied.
                return m.round
            transitions = self._adopt_locked(remote)
            round_ = self.machine.round
        if transitions:
            BreakerSlot._after_transitions(self, transitions)  # listeners only: nothing to push
        return round_

    def _adopt_locked(self, r: RemoteState) -> list[Transition]:
        m = self.machine
        now = self.clock()
        self.remote_version = r.version
        self.remote_opens = r.opens
        self.hold_until = 0.0
        self.local_trip = False  # the fleet moved on: its state wins over a trip of ours
        self._lead = self._tail = 0
        self._had_success = False
        if r.failure:
            self.last_failure = FailureInfo.parse(r.failure)
        out: list[Transition] = []
        if r.mode is not m.mode:
            if r.mode is Mode.FORCED_OPEN:
                out += m.force_open(now)
            elif r.mode is Mode.DISABLED:
                out += m.disable(now)
            else:
                out += m.reset(now)
        if r.mode is Mode.NORMAL:
            if r.version == m.version and r.state is m.state:
                # Nothing moved on either side since we last adopted: keep the round (probes and
                # calls admitted in it are still current), refresh only the open wait.
                if r.state is State.OPEN:
                    m.open_until = now + r.remaining
            else:
                m.version = min(m.version, r.version - 1)  # our local moves never outrank Redis
                out += m.adopt(now, r.state, r.version, r.remaining, r.reason, r.opens, r.detail)
            self.fleet_probes = r.state is State.HALF_OPEN
        m.version = r.version
        self.dirty = False
        self._refresh_fast()
        return out
