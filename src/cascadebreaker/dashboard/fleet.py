"""The aggregated live state of every followed sidecar: pure, fed by collectors, read by the page.

Inputs carry their times (`now`: monotonic, `wall`: unix seconds), so tests drive it without
sockets or sleeps. Two kinds of input meet here:

- a sidecar's `/status` (asked for now and then): the whole truth about that sidecar, as of the
  moment it was asked;
- updates from the live streams (Watch, Redis): one endpoint's change, at once.

A stream update wins over a `/status` that was asked for before the update arrived; a later
`/status` wins over both. An open breaker is read off an update's cause chain the moment the
update arrives (its root link is `<upstream> * *: circuit open`, its next link the caller's
endpoint), and confirmed or corrected by that sidecar's next `/status`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from cascadebreaker.dashboard import views
from cascadebreaker.dashboard.model import (
    Link,
    Rates,
    Sidecar,
    SidecarStatus,
    Unavailability,
    Update,
    service_of,
)
from cascadebreaker.dashboard.views import Belief, BreakerView

__all__ = ["Fleet"]

# What the page shows, compared after every input: breaker states, service availability and
# the endpoints believed unavailable.
_Seen = tuple[dict[tuple[str, str], str], dict[str, str], frozenset[str]]


class Fleet:
    """Every sidecar followed, what the streams said, the demo's faults, and a timeline."""

    def __init__(
        self,
        on_change: Callable[[], None] = lambda: None,
        timeline_size: int = 300,
        updates_per_endpoint: int = 6,
    ) -> None:
        self.sidecars: dict[str, Sidecar] = {}
        self.declared: set[str] = set()  # services known to exist (demo topology)
        self.heard: dict[str, dict[str, Unavailability]] = {}  # unfollowed services (Redis)
        self.endpoints: set[str] = set()  # every endpoint ever seen
        self.updates_of: dict[str, deque[dict[str, Any]]] = {}
        self._updates_per_endpoint = updates_per_endpoint
        self.faults: dict[str, str] = {}
        self.timeline: deque[dict[str, Any]] = deque(maxlen=timeline_size)
        self.redis: str = "none"  # none | connecting | open | lost
        self.version = 0
        self._seen: _Seen = ({}, {}, frozenset())
        self._on_change = on_change

    # -- inputs -----------------------------------------------------------------------------

    def follow(self, admin_url: str, service: str | None = None) -> Sidecar:
        """Start following a sidecar (its service name, when known in advance)."""
        sidecar = self.sidecars.setdefault(admin_url, Sidecar(admin_url, service))
        self.version += 1
        return sidecar

    def declare(self, services: Iterable[str]) -> None:
        """Services that exist even before anyone reports them (the demo's topology)."""
        self.declared.update(services)
        self.version += 1

    def status_received(
        self, admin_url: str, status: SidecarStatus, asked_at: float, wall: float
    ) -> None:
        """A sidecar answered /status (asked at monotonic `asked_at`)."""
        sidecar = self.sidecars[admin_url]
        sidecar.asked += 1
        if sidecar.reachable is False:
            self._log(wall, "sidecar", status.service, f"{status.service} sidecar reachable again")
        sidecar.service, sidecar.status = status.service, status
        self.heard.pop(status.service, None)  # heard before its sidecar was known; it speaks now
        sidecar.reachable, sidecar.error = True, ""
        # Stream updates that arrived after the question was asked are newer than the answer.
        kept = {e: t for e, t in sidecar.touched.items() if t > asked_at}
        fresh = {e: u for e, u in status.unavailable.items() if e not in kept}
        for endpoint in kept:
            if endpoint in sidecar.unavailable:
                fresh[endpoint] = sidecar.unavailable[endpoint]
        sidecar.unavailable, sidecar.touched = fresh, kept
        sidecar.inferred_open = {u: t for u, t in sidecar.inferred_open.items() if t > asked_at}
        self._rates(sidecar, status, asked_at)
        self.endpoints.update(status.unavailable)
        for edge in status.edges:
            self.endpoints.update((edge.caller, edge.callee))
        sidecar.asked_at = asked_at
        self._changed(wall)

    def status_failed(self, admin_url: str, reason: str, wall: float) -> None:
        """A sidecar did not answer /status (or answered something unreadable)."""
        sidecar = self.sidecars[admin_url]
        sidecar.asked += 1
        if sidecar.reachable is not False:
            text = f"{sidecar.name} sidecar unreachable: {reason}"
            self._log(wall, "sidecar", sidecar.name, text)
        sidecar.reachable, sidecar.error = False, reason
        self._changed(wall)

    def stream_changed(self, admin_url: str, state: str, wall: float) -> None:
        """A sidecar's Watch stream is `connecting`, `open` or `lost`."""
        self.sidecars[admin_url].stream = state
        self._changed(wall)

    def redis_changed(self, state: str, wall: float) -> None:
        """The Redis subscription is `connecting`, `open` or `lost`."""
        self.redis = state
        self._changed(wall)

    def update_received(
        self, update: Update, now: float, wall: float, admin_url: str | None = None
    ) -> None:
        """An update from a live stream (`admin_url`: the sidecar whose Watch carried it)."""
        targets = [self.sidecars[admin_url]] if admin_url in self.sidecars else []
        if not targets:
            targets = [s for s in self.sidecars.values() if s.service == update.service]
        for sidecar in targets:
            self._apply(sidecar.unavailable, update)
            sidecar.touched[update.endpoint] = now
        if not targets:
            self._apply(self.heard.setdefault(update.service, {}), update)
        self._infer_breaker(update, now)
        self._remember(update, wall)
        self._changed(wall)

    def _infer_breaker(self, update: Update, now: float) -> None:
        """An unavailability rooted in an open breaker: the caller's breaker is OPEN now."""
        if update.available or len(update.chain) < 2 or not update.chain[0].breaker_open:
            return
        root, caller = update.chain[0], update.chain[1].service
        for sidecar in self.sidecars.values():
            if sidecar.service == caller:
                sidecar.inferred_open[root.service] = now
                sidecar.unavailable[root.endpoint] = Unavailability((root,), update.expires_at)
                sidecar.touched[root.endpoint] = now

    def _remember(self, update: Update, wall: float) -> None:
        """Keep the update with its endpoint (for the cause chain panel) and on the timeline."""
        self.endpoints.add(update.endpoint)
        self.endpoints.update(link.endpoint for link in update.chain)
        root = _link_text(update.chain[0]) if update.chain else None
        history = self.updates_of.setdefault(
            update.endpoint, deque(maxlen=self._updates_per_endpoint)
        )
        history.appendleft(
            {
                "at": wall,
                "via": update.via,
                "service": update.service,
                "endpoint": update.endpoint,
                "available": update.available,
                "version": update.version,
                "root": root,
            }
        )
        word = "available" if update.available else "unavailable"
        because = f" ← {root}" if root else ""
        text = f"{update.endpoint} {word}{because} (v{update.version}, {update.via})"
        self._log(wall, "update", update.service, text, update.endpoint)

    def fault_changed(self, service: str, description: str | None, wall: float) -> None:
        """The demo's fault switch of `service` now says `description` (None: no fault)."""
        if self.faults.get(service) == description:
            return
        if description is None:
            self.faults.pop(service, None)
            self._log(wall, "fault", service, f"fault cleared: {service}")
        else:
            self.faults[service] = description
            self._log(wall, "fault", service, f"fault injected: {service} {description}")
        self._changed(wall)

    def tick(self, wall: float) -> bool:
        """Let expiries take effect; True when what the page shows changed."""
        before = self.version
        self._note_transitions(wall)
        if self.version == before:
            return False
        self._on_change()
        return True

    # -- what the page shows ----------------------------------------------------------------

    def services(self) -> list[str]:
        """Every service known: followed, declared, named by a breaker, an edge or an update."""
        names = set(self.declared) | set(self.heard)
        for sidecar in self.sidecars.values():
            names.add(sidecar.name)
            if sidecar.status is not None:
                names.update(b.upstream for b in sidecar.status.breakers)
        names.update(service_of(e) for e in self.endpoints)
        return sorted(names)

    def sidecars_of(self, service: str) -> list[Sidecar]:
        """The followed sidecars (replicas) of `service`."""
        return [s for s in self.sidecars.values() if s.name == service]

    def beliefs(self, wall: float) -> dict[str, Belief]:
        """Every endpoint believed unavailable now (see `views.beliefs`)."""
        return views.beliefs(self.sidecars.values(), self.heard, wall)

    def partial(self, wall: float) -> dict[str, tuple[int, int]]:
        """Endpoints some but not all replicas of their service call unavailable: (said, of)."""
        return views.partial(self.sidecars.values(), wall)

    def availability(self, wall: float, beliefs: dict[str, Belief] | None = None) -> dict[str, str]:
        """`available`, `unavailable` or `unreachable` for every service."""
        beliefs = self.beliefs(wall) if beliefs is None else beliefs
        return views.availability(self.services(), self.sidecars.values(), beliefs)

    def breakers(self) -> dict[tuple[str, str], BreakerView]:
        """Every (service, upstream) breaker, aggregated over the service's replicas."""
        return views.breakers(self.sidecars.values())

    # -- internals --------------------------------------------------------------------------

    @staticmethod
    def _apply(table: dict[str, Unavailability], update: Update) -> None:
        if update.available:
            table.pop(update.endpoint, None)
        else:
            table[update.endpoint] = Unavailability(update.chain, update.expires_at)

    def _rates(self, sidecar: Sidecar, status: SidecarStatus, asked_at: float) -> None:
        for breaker in status.breakers:
            previous = sidecar.counts.get(breaker.upstream)
            sidecar.counts[breaker.upstream] = (breaker.counts, asked_at)
            if previous is None or asked_at <= previous[1]:
                continue
            delta = breaker.counts.minus(previous[0])
            if delta is None:
                sidecar.rates.pop(breaker.upstream, None)
                continue
            seconds = asked_at - previous[1]
            sidecar.rates[breaker.upstream] = Rates(
                delta.calls / seconds, delta.failures / seconds, delta.rejected / seconds
            )

    def _changed(self, wall: float) -> None:
        self.version += 1
        self._note_transitions(wall)
        self._on_change()

    def _note_transitions(self, wall: float) -> None:
        """Log breaker transitions and availability changes since the last look."""
        states = {key: view.state for key, view in self.breakers().items() if not view.stale}
        beliefs = self.beliefs(wall)
        availability = self.availability(wall, beliefs)
        old_states, old_availability, _ = self._seen
        for (service, upstream), state in sorted(states.items()):
            before = old_states.get((service, upstream))
            if before is not None and before != state:
                self._log(wall, "breaker", service, f"{service} → {upstream}: {before} → {state}")
        # A service none of whose sidecars was asked yet has no state worth a timeline entry.
        availability = {
            s: a
            for s, a in availability.items()
            if all(sidecar.reachable is not None for sidecar in self.sidecars_of(s))
        }
        for service, now in sorted(availability.items()):
            before = old_availability.get(service)
            if before is not None and before != now:
                self._log(wall, "availability", service, f"{service}: {before} → {now}")
        seen = (states, availability, frozenset(beliefs))
        if seen != self._seen:
            self.version += 1
        self._seen = seen

    def _log(
        self, wall: float, kind: str, service: str, text: str, endpoint: str | None = None
    ) -> None:
        self.timeline.appendleft(
            {"at": wall, "kind": kind, "service": service, "text": text, "endpoint": endpoint}
        )


def _link_text(link: Link) -> str:
    return f"{link.endpoint}: {link.reason}" if link.reason else str(link.endpoint)
