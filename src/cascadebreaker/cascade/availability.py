"""The availability rules, applied by one sidecar for its own service.

- A dependency is unavailable while this sidecar's breaker for it is OPEN (HALF_OPEN is not) or
  a received unavailability for it has not expired.
- An endpoint of this service is unavailable while any required dependency is unavailable
  through a cause chain that does not already contain that endpoint (so cycles terminate),
  except while the evidence of whether it survives that dependency is still in flight
  (`undecided`: requests it has not answered yet under which a call to it failed).
- A received endpoint is unavailable only when every live instance of its service (or the
  configured quorum of them) reports it so (`instances.InstanceReports`); `_remote` caches that
  aggregate so the per-request check stays a dict lookup.

`AvailabilityTable` is pure: every input (breaker transition, received update, learned edge)
returns the updates to send; time comes from injected clocks. It is not thread-safe: drive it
from one event loop.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from cascadebreaker.cascade.endpoints import Endpoint
from cascadebreaker.cascade.graph import DependencyGraph, EdgeSource
from cascadebreaker.cascade.instances import InstanceCount, InstanceReports
from cascadebreaker.cascade.updates import (
    AvailabilityUpdate,
    Cause,
    CauseChain,
    Verdict,
    chain_to_list,
    sign,
    verify,
)
from cascadebreaker.contract import CAUSE_CHAIN, EXPIRES_AT, Reason

__all__ = ["AvailabilityTable", "Propagation", "Target", "Unavailability"]

# A breaker guards one endpoint, or a whole service when named by its service string.
Target = Endpoint | str

_NO_UPDATES: Final[tuple[AvailabilityUpdate, ...]] = ()


@dataclass(frozen=True, slots=True)
class Unavailability:
    """Why an endpoint is unavailable and until when (wall time for the wire, monotonic here)."""

    cause_chain: CauseChain
    expires_at: float  # unix wall seconds, carried in updates
    deadline: float  # local monotonic seconds, compared on every check

    def involves(self, endpoint: Endpoint) -> bool:
        """True when `endpoint` is already a link of the chain."""
        return any(c.endpoint == endpoint for c in self.cause_chain)


class Propagation(NamedTuple):
    """The result of one input: the verdict on a received update and the updates to send."""

    verdict: Verdict
    updates: tuple[AvailabilityUpdate, ...]


_ACCEPTED_NOTHING: Final = Propagation(Verdict.ACCEPTED, _NO_UPDATES)


class AvailabilityTable:
    """Availability of this service's endpoints and of the dependencies it knows about."""

    def __init__(
        self,
        service: str,
        graph: DependencyGraph,
        *,
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
        secret: bytes | None = None,
        max_ttl: float = 300.0,
        max_skew: float = 60.0,
        recovery_ttl: float = 60.0,
        max_versions: int = 100_000,
        instance: str = "",
        quorum: float = 1.0,
    ) -> None:
        self.service = service
        self.graph = graph
        self._clock = clock
        self._wall = wall_clock
        self._secret = secret
        self._max_ttl = max_ttl
        self._max_skew = max_skew
        self._recovery_ttl = recovery_ttl
        self._max_versions = max_versions
        self._roots: dict[Endpoint, Unavailability] = {}
        self._service_roots: dict[str, Unavailability] = {}
        self.instance = instance  # ours, named in every update we send
        self._instances = InstanceReports(quorum)
        self._instances_touched: set[Endpoint] = set()
        self._remote: dict[Endpoint, Unavailability] = {}  # aggregated over instances
        self._derived: dict[Endpoint, Unavailability] = {}
        # Versions are per instance: replicas' clocks and sequences are their own.
        self._versions: dict[tuple[Endpoint, str], int] = {}
        self._last_sent: dict[Endpoint, AvailabilityUpdate] = {}  # ours, for new subscribers
        self._last_version = 0
        self.counters: Counter[str] = Counter()
        # `(endpoint, dependency) -> True` while the evidence of whether the endpoint survives
        # that dependency is still in flight: the rule waits for it (`Learner.undecided`).
        self.undecided: Callable[[Endpoint, Endpoint], bool] | None = None

    # -- the per-request path -------------------------------------------------------------

    def check(self, endpoint: Endpoint) -> Unavailability | None:
        """None when `endpoint` is available now, else why it is not. O(1)."""
        if not (self._roots or self._service_roots or self._remote or self._derived):
            return None  # the healthy case: four truth tests, no allocation
        return self._best(endpoint, self._clock(), exclude=None)

    def is_available(self, endpoint: Endpoint) -> bool:
        """True when `endpoint` is available now."""
        return self.check(endpoint) is None

    def learn(
        self,
        caller: Endpoint,
        callee: Endpoint,
        *,
        optional: bool = False,
        source: EdgeSource = EdgeSource.HEADER,
    ) -> tuple[AvailabilityUpdate, ...]:
        """Record one observed call; usually returns no updates (a known edge, nothing down)."""
        if not self.graph.observe(caller, callee, optional=optional, source=source):
            return _NO_UPDATES
        return self._propagate((caller,), self._clock())

    # -- inputs ---------------------------------------------------------------------------

    def breaker_opened(
        self, target: Target, retry_after: float, reason: str = Reason.CIRCUIT_OPEN.value
    ) -> tuple[AvailabilityUpdate, ...]:
        """This sidecar's breaker for `target` opened (or was refreshed) for `retry_after` s."""
        ttl = min(retry_after, self._max_ttl)
        if not ttl > 0:  # already due for a probe (or NaN): nothing to propagate
            return self.breaker_recovered(target)
        now, wall = self._clock(), self._wall()
        if isinstance(target, str):
            root = Endpoint.service_wide(target)
            self._service_roots[target] = Unavailability(
                (Cause(root, reason),), wall + ttl, now + ttl
            )
            return self._propagate(self._callers_of_service(target), now)
        self._roots[target] = Unavailability((Cause(target, reason),), wall + ttl, now + ttl)
        return self._propagate((target,), now, seeds_are_callees=True)

    def breaker_recovered(
        self, target: Target, reason: str = Reason.OPEN_WAIT_OVER.value
    ) -> tuple[AvailabilityUpdate, ...]:
        """This sidecar's breaker for `target` left OPEN (HALF_OPEN or CLOSED), or its open
        wait is over (`open_wait_over`: it admits a probe); `reason` goes into the updates."""
        now = self._clock()
        if isinstance(target, str):
            if self._service_roots.pop(target, None) is None:
                return _NO_UPDATES
            return self._propagate(self._callers_of_service(target), now, reason=reason)
        if self._roots.pop(target, None) is None:
            return _NO_UPDATES
        return self._propagate((target,), now, seeds_are_callees=True, reason=reason)

    def open_roots(self) -> list[Target]:
        """The upstreams (and endpoints of them) whose unavailability this sidecar is the root
        of: its own open breakers."""
        return [*self._service_roots, *self._roots]

    def breaker_transition(
        self,
        target: Target,
        to_state: str,
        retry_after: float = 0.0,
        reason: str = Reason.CIRCUIT_OPEN.value,
    ) -> tuple[AvailabilityUpdate, ...]:
        """Apply a breaker transition by state name (`OPEN`, `HALF_OPEN`, `CLOSED`); `reason`
        is why (a refusal code when opened, the transition's code when it left OPEN)."""
        if str(to_state).upper() == "OPEN":
            return self.breaker_opened(target, retry_after, reason)
        return self.breaker_recovered(target, reason)

    def receive(self, update: AvailabilityUpdate) -> Propagation:
        """Apply an update from another sidecar: verify, then propagate to our endpoints.

        Never about our own service (our breakers alone decide our endpoints), never with a
        version further ahead of our clock than `max_skew` (it would make every later real
        update for that endpoint stale)."""
        now, wall = self._clock(), self._wall()
        endpoint = update.endpoint
        self.counters["received"] += 1
        verdict = verify(
            update,
            self._secret,
            now=wall,
            last_version=self._versions.get((endpoint, update.instance)),
            receiver=self.service,
            max_skew=self._max_skew,
        )
        if verdict is not Verdict.ACCEPTED:
            self.counters[f"rejected_{verdict.value}"] += 1
            return Propagation(verdict, _NO_UPDATES)
        self.counters["accepted"] += 1
        self._remember_version((endpoint, update.instance), update.version)
        ttl = min(update.expires_at - wall, self._max_ttl)
        report = None
        if not update.available:
            report = Unavailability(update.cause_chain, wall + ttl, now + ttl)
        why = update.reason or Reason.RECOVERED.value  # an unavailability says its root's
        changed = self._reaggregate(self._instances.record(update, report, now + ttl), now, why)
        if not changed:
            return _ACCEPTED_NOTHING
        return Propagation(Verdict.ACCEPTED, changed)

    def sibling_reported(self, update: AvailabilityUpdate) -> tuple[AvailabilityUpdate, ...]:
        """Another instance of our own service says one of our endpoints is unavailable (heard
        on a shared bus): when it is available here, say so, naming us, for as long as the
        sibling's report lives, so dependents count a live instance that can serve it."""
        if update.service != self.service or update.available or update.instance == self.instance:
            return _NO_UPDATES
        wall = self._wall()
        verdict = verify(update, self._secret, now=wall, max_skew=self._max_skew)
        if verdict is not Verdict.ACCEPTED:
            self.counters[f"rejected_{verdict.value}"] += 1
            return _NO_UPDATES
        endpoint = update.endpoint
        if self._best(endpoint, self._clock(), exclude=None) is not None:
            return _NO_UPDATES  # unavailable here too: our own update already says so
        until = min(update.expires_at, wall + self._max_ttl)
        last = self._last_sent.get(endpoint)
        if last is not None and last.available and last.expires_at >= until:
            return _NO_UPDATES  # our answer still outlives the sibling's report
        self.counters["sibling_answers"] += 1
        until = max(until, wall + self._recovery_ttl)
        return (self._update(endpoint, None, available_until=until),)

    def presence(self, ttl: float) -> AvailabilityUpdate:
        """Our presence for `ttl` seconds: an available update about our whole service, so a
        dependent counts this instance live for every endpoint it has no report about."""
        return self._update(
            Endpoint.service_wide(self.service),
            None,
            available_until=self._wall() + ttl,
            remember=False,
        )

    def instances(self, endpoint: Endpoint) -> InstanceCount:
        """Live instances of another service's endpoint and how many report it unavailable."""
        return self._instances.count(endpoint, self._clock())

    def expire_instances(self) -> tuple[AvailabilityUpdate, ...]:
        """Forget expired instance reports and presences; an endpoint whose last available
        instance went silent becomes unavailable here (call periodically)."""
        now = self._clock()
        touched = self._instances_touched | self._instances.expire(now)
        self._instances_touched = set()
        if not touched:
            return _NO_UPDATES
        return self._reaggregate(touched, now)

    def _reaggregate(
        self, endpoints: Iterable[Endpoint], now: float, reason: str = Reason.RECOVERED.value
    ) -> tuple[AvailabilityUpdate, ...]:
        """Recompute the cached aggregate of `endpoints`; propagate those that changed."""
        changed: list[Endpoint] = []
        for endpoint in endpoints:
            aggregate, _ = self._instances.aggregate(endpoint, now)
            if aggregate == self._remote.get(endpoint):
                continue
            if aggregate is None:
                del self._remote[endpoint]
            else:
                self._remote[endpoint] = aggregate
            changed.append(endpoint)
        if not changed:
            return _NO_UPDATES
        return self._propagate(changed, now, seeds_are_callees=True, reason=reason)

    def graph_changed(self, callers: Iterable[Endpoint]) -> tuple[AvailabilityUpdate, ...]:
        """Re-evaluate `callers` after edges were declared, marked optional or expired."""
        return self._propagate(tuple(callers), self._clock(), reason=Reason.GRAPH_CHANGED.value)

    def current(self, since_version: int = 0) -> list[AvailabilityUpdate]:
        """What a new `Watch` subscriber must hear about our endpoints.

        `since_version=0` (a first subscription): every live unavailability. Otherwise (a
        reconnect) every last update newer than `since_version`, so missed recoveries arrive
        too; a recovery whose validity ran out is re-issued with a fresh version.
        """
        wall = self._wall()
        found: list[AvailabilityUpdate] = []
        for endpoint, update in list(self._last_sent.items()):
            if update.version <= since_version:
                continue
            if not update.available:
                if update.expires_at > wall:
                    found.append(update)
            elif since_version > 0:
                live = update.expires_at > wall
                found.append(update if live else self._update(endpoint, None, update.reason))
        return found

    def expire_edges(self) -> tuple[AvailabilityUpdate, ...]:
        """Age out unseen learned edges and re-evaluate their callers (call periodically)."""
        removed = self.graph.expire()
        if not removed:
            return _NO_UPDATES
        return self.graph_changed(e.caller for e in removed)

    def expire(self) -> list[Endpoint]:
        """Drop expired entries; return our endpoints that became available by expiry.

        No updates are sent: receivers hold the same absolute expiry and expire on their own.
        """
        now = self._clock()
        self._instances_touched |= self._instances.expire(now)  # re-aggregated by expire_instances
        for table in (self._roots, self._remote):
            for key in [k for k, u in table.items() if u.deadline <= now]:
                del table[key]
        for name in [k for k, u in self._service_roots.items() if u.deadline <= now]:
            del self._service_roots[name]
        gone = [k for k, u in self._derived.items() if u.deadline <= now]
        for key in gone:
            del self._derived[key]
        return gone

    def next_deadline(self) -> float | None:
        """The earliest monotonic deadline held, to schedule `expire`; None when nothing is down."""
        deadlines = [
            u.deadline
            for table in (self._roots, self._service_roots, self._remote, self._derived)
            for u in table.values()
        ]
        instances = self._instances.next_deadline()
        if instances is not None:
            deadlines.append(instances)
        return min(deadlines, default=None)

    # -- views ----------------------------------------------------------------------------

    def unavailable(self) -> dict[Endpoint, Unavailability]:
        """Every endpoint known unavailable now (ours, roots, received), for `/status`."""
        now = self._clock()
        found: dict[Endpoint, Unavailability] = {}
        for key in (*self._roots, *self._remote, *self._derived):
            u = self._best(key, now, exclude=None)
            if u is not None:
                found[key] = u
        for name, u in self._service_roots.items():
            if u.deadline > now:
                found[Endpoint.service_wide(name)] = u
        return found

    def snapshot(self) -> dict[str, Any]:
        """JSON-friendly view: unavailable endpoints with cause chains, edges, counters."""
        now, wall = self._clock(), self._wall()
        return {
            "service": self.service,
            "unavailable": [
                {
                    "endpoint": str(e),
                    CAUSE_CHAIN: chain_to_list(u.cause_chain),
                    "expiresIn": round(max(u.deadline - now, 0.0), 3),
                    EXPIRES_AT: round(wall + max(u.deadline - now, 0.0), 3),
                }
                for e, u in self.unavailable().items()
            ],
            "edges": [
                {"caller": str(e.caller), "callee": str(e.callee), "required": e.required}
                for e in self.graph.edges()
            ],
            "instances": self.instance_view(),
            "counters": dict(self.counters),
        }

    def instance_view(self) -> list[dict[str, Any]]:
        """Endpoints of other services some live instance reports unavailable, with counts."""
        now = self._clock()
        found = []
        for endpoint in self._instances.reported():
            count = self._instances.count(endpoint, now)
            if count.unavailable:
                found.append(
                    {
                        "endpoint": str(endpoint),
                        "live": count.live,
                        "unavailable": count.unavailable,
                        "available_fraction": round(count.fraction, 4),
                    }
                )
        return found

    # -- the rules ------------------------------------------------------------------------

    def _best(
        self, endpoint: Endpoint, now: float, exclude: Endpoint | None
    ) -> Unavailability | None:
        """The live unavailability of `endpoint` with the latest deadline, skipping chains
        that contain `exclude`."""
        best: Unavailability | None = None
        for u in (
            self._roots.get(endpoint),
            self._service_roots.get(endpoint.service),
            self._remote.get(endpoint),
            self._derived.get(endpoint),
        ):
            if u is None or u.deadline <= now:
                continue
            if exclude is not None and u.involves(exclude):
                continue
            if best is None or _better(u, best):
                best = u
        return best

    def _derive(self, endpoint: Endpoint, now: float) -> Unavailability | None:
        """Apply the rule to one of our endpoints: the best live cause among required deps."""
        best: Unavailability | None = None
        via: Endpoint | None = None
        undecided = self.undecided
        for dep in self.graph.dependencies(endpoint):
            if undecided is not None and undecided(endpoint, dep):
                continue
            u = self._best(dep, now, exclude=endpoint)
            if u is not None and (best is None or _better(u, best)):
                best, via = u, dep
        if best is None or via is None:
            return None
        link = Cause(endpoint, f"requires {via}")
        return Unavailability((*best.cause_chain, link), best.expires_at, best.deadline)

    def _propagate(
        self,
        seeds: Iterable[Endpoint],
        now: float,
        seeds_are_callees: bool = False,
        reason: str = Reason.GRAPH_CHANGED.value,
    ) -> tuple[AvailabilityUpdate, ...]:
        """Re-derive our endpoints reachable from `seeds` until nothing changes; a recovery
        this causes says `reason` (an unavailability says its root's reason)."""
        work: list[Endpoint] = []
        for seed in seeds:
            if seeds_are_callees:
                work.extend(self.graph.callers(seed))
            else:
                work.append(seed)
        work = [e for e in work if e.service == self.service]
        if not work:
            return _NO_UPDATES
        # Endpoint -> state before this propagation; only net changes are sent, so a
        # transient flip while the fixpoint settles never reaches the wire.
        before: dict[Endpoint, Unavailability | None] = {}
        # Each change re-queues callers and chains only grow; the budget is a safety net.
        budget = 64 * (len(self._derived) + len(work) + 16)
        while work and budget > 0:
            budget -= 1
            endpoint = work.pop()
            current = self._derived.get(endpoint)
            # An entry that just ran out still counts as the state before: a root announcing
            # its recovery at its deadline must turn into available=true, not into silence.
            ran_out = current is not None and current.deadline <= now
            new = self._derive(endpoint, now)
            if new == current and not ran_out:
                continue
            before.setdefault(endpoint, current)
            if new is None:
                self._derived.pop(endpoint, None)
            else:
                self._derived[endpoint] = new
            work.extend(c for c in self.graph.callers(endpoint) if c.service == self.service)
        if budget <= 0:
            self.counters["propagation_budget_exhausted"] += 1
        updates = tuple(
            self._update(e, self._derived.get(e), reason)
            for e, old in before.items()
            if self._derived.get(e) != old
        )
        self.counters["sent"] += len(updates)
        return updates

    def _update(
        self,
        endpoint: Endpoint,
        u: Unavailability | None,
        recovered: str = "",
        available_until: float | None = None,
        remember: bool = True,
    ) -> AvailabilityUpdate:
        wall = self._wall()
        version = max(self._last_version + 1, int(wall * 1_000_000))
        # Millisecond precision is what the wire keeps; rounding here spares `sign` a copy.
        self._last_version = version
        self._remember_version((endpoint, self.instance), version)
        if u is None:
            until = wall + self._recovery_ttl if available_until is None else available_until
            expires_at = round(until * 1000) / 1000
            update = AvailabilityUpdate(
                self.service,
                endpoint,
                True,
                (),
                expires_at,
                version,
                instance=self.instance,
                reason=recovered,
            )
        else:
            expires_at = round(u.expires_at * 1000) / 1000
            root = u.cause_chain[0].reason
            update = AvailabilityUpdate(
                self.service,
                endpoint,
                False,
                u.cause_chain,
                expires_at,
                version,
                instance=self.instance,
                reason=root,
            )
        if self._secret is not None:
            update = sign(update, self._secret)
        if remember:
            self._last_sent[endpoint] = update
        return update

    def _remember_version(self, key: tuple[Endpoint, str], version: int) -> None:
        versions = self._versions
        if key not in versions and len(versions) >= self._max_versions:
            del versions[next(iter(versions))]  # forget the oldest-inserted report
        versions[key] = version

    def _callers_of_service(self, service: str) -> list[Endpoint]:
        return [c for e in self.graph.callees_of_service(service) for c in self.graph.callers(e)]


def _better(a: Unavailability, b: Unavailability) -> bool:
    """Prefer the later deadline (holds dependents longest), then the shorter chain."""
    if a.deadline != b.deadline:
        return a.deadline > b.deadline
    return len(a.cause_chain) < len(b.cause_chain)
