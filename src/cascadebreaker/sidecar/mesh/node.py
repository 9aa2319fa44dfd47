"""One sidecar's part of the cascade: the table, its inputs (breakers, peers, Redis) and outputs.

Every input of the pure `AvailabilityTable` returns the updates to send; `CascadeNode.send` puts
them on our `Watch` streams (callers' sidecars) and on Redis. Updates received from peers go
through `table.receive` and whatever changes about our own endpoints is sent on at once.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from cascadebreaker.cascade import (
    AvailabilityTable,
    AvailabilityUpdate,
    DependencyGraph,
    Edge,
    Endpoint,
    Learner,
    OptionalityRules,
    RouteTemplates,
    SurvivalLedger,
    Target,
    TraceTable,
    TrickleGate,
    Unavailability,
    Verdict,
    load_secret,
)
from cascadebreaker.cascade.instances import InstanceCount, resolve_instance
from cascadebreaker.contract import Reason, State, refusal_reason
from cascadebreaker.sidecar.config import CascadeConfig, valid_address
from cascadebreaker.sidecar.grpc.tls import installed_tls
from cascadebreaker.sidecar.logs import RateLimitedLog
from cascadebreaker.sidecar.mesh.bus import UpdateBus
from cascadebreaker.sidecar.mesh.hop_memo import MemoHopTrust
from cascadebreaker.sidecar.mesh.watch import PeerWatchers, WatchHub

if TYPE_CHECKING:
    from cascadebreaker import CircuitBreaker
    from cascadebreaker.sidecar.mesh.nats_bus import NatsBus
    from cascadebreaker.sidecar.mesh.redis_bus import RedisBus
    from cascadebreaker.sidecar.proxy.ports import PluginHost

__all__ = ["CascadeNode"]

log = logging.getLogger("cascadebreaker.sidecar.cascade")

_HOUSEKEEPING = 1.0  # seconds between expiry sweeps (checks are lazy; this frees memory)
_EDGE_SWEEP = 30.0
MAX_PEERS_PER_UPSTREAM = 64  # sidecars (replicas) of one upstream we subscribe to

_untrusted_claims = RateLimitedLog(log, logging.INFO)


def _new_traceparent() -> str:
    """A W3C traceparent for a new, sampled trace."""
    return f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01"


class CascadeNode:
    """The cascade state of one sidecar and the transports that carry its updates."""

    def __init__(self, runtime: PluginHost, config: CascadeConfig) -> None:
        self.runtime = runtime
        self.config = config
        self.service = runtime.service
        self.loop = runtime.loop
        self._loop_thread = threading.get_ident()
        self.secret = load_secret(config.secret)
        self.graph = DependencyGraph(time.monotonic, edge_ttl=config.edge_ttl)
        self.advertise = self._advertised_address()
        self.instance = resolve_instance(config.instance, dict(os.environ), self._host_port())
        self.table = AvailabilityTable(
            self.service,
            self.graph,
            clock=time.monotonic,
            wall_clock=time.time,
            secret=self.secret,
            max_ttl=config.max_ttl,
            max_skew=config.max_clock_skew,
            instance=self.instance,
            quorum=config.quorum,
        )
        self.templates = RouteTemplates(config.templates)
        learned = config.optionality
        self.ledger: SurvivalLedger | None = None
        trickle: TrickleGate | None = None
        if learned.learn:
            rules = OptionalityRules(
                learned.threshold, learned.ratio, learned.half_life, learned.ttl
            )
            self.ledger = SurvivalLedger(time.monotonic, rules)
            if learned.trickle_interval > 0:
                trickle = TrickleGate(time.monotonic, learned.trickle_interval)
        self.success = learned.success_table()
        self.learner = Learner(
            self.table,
            self.templates,
            TraceTable(time.monotonic),
            MemoHopTrust(self.secret, max_skew=config.max_clock_skew),
            wall_clock=time.time,
            learn_from_traces=config.learn_from_traces,
            ledger=self.ledger,
            trickle=trickle,
            new_traceparent=_new_traceparent if config.start_traces else None,
        )
        loopback_only = self.secret is None
        tls = installed_tls(runtime)  # peers' Watch streams dial TLS when it is configured
        self.hub = WatchHub(self._current, loopback_only=loopback_only)
        self.peers = PeerWatchers(
            self.service,
            self._from_peer,
            loopback_only=loopback_only,
            on_malformed=lambda: self._count_rejected("malformed"),
            on_forget=self._forget_peer,
            open_channel=tls.secure_channel if tls is not None else None,
        )
        self.peer_of: dict[str, set[str]] = {}  # upstream -> gRPC addresses of its sidecars
        self.redis: RedisBus | None = None
        self.nats: NatsBus | None = None
        self.buses: list[UpdateBus] = [self.hub]  # every transport our updates go out on
        self.stats: Counter[str] = Counter()
        self._tasks: list[asyncio.Task[None]] = []
        for edge in config.edges:
            self.graph.declare(
                Endpoint.parse(edge.caller), Endpoint.parse(edge.callee), required=not edge.optional
            )
        if loopback_only:
            log.warning(
                "cascade: no secret (cascade.secret or CCB_SECRET): availability updates and "
                "hop tokens are unauthenticated and accepted from loopback peers only"
            )

    def _advertised_address(self) -> bytes | None:
        if self.config.advertise:
            return self.config.advertise.encode()
        grpc_listen = self.runtime.config.listen.grpc
        if grpc_listen is None or grpc_listen.port == 0:
            return None
        host = grpc_listen.host
        if host in ("0.0.0.0", "::", ""):
            return None  # not an address a peer can dial; set cascade.advertise
        return f"{host}:{grpc_listen.port}".encode()

    def _host_port(self) -> str:
        """This sidecar's address, the instance name of last resort."""
        if self.advertise is not None:
            return self.advertise.decode()
        listen = self.runtime.config.listen
        where = listen.inbound or listen.grpc or listen.admin
        return f"{where.host}:{where.port}" if where is not None else f"pid-{os.getpid()}"

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Watch the breakers, connect Redis and the configured peers, start housekeeping."""
        for name, route in self.runtime.routes.items():
            if route.breaker is not None:
                self._watch_breaker(name, route.breaker)
            if route.endpoints is not None:  # `scope: endpoint`: each is a root of its own
                route.endpoints.on_new(functools.partial(self._watch_endpoint_breaker, name))
        redis_url = self.config.redis or (
            self.runtime.config.store if self.runtime.config.store != "memory" else None
        )
        if redis_url is not None:
            from cascadebreaker.sidecar.mesh.redis_bus import RedisBus

            self.redis = RedisBus(
                redis_url,
                self.config.namespace,
                self._from_redis,
                lambda: self._count_rejected("malformed"),
            )
            self.redis.start()
            self.buses.append(self.redis)
        if self.config.nats is not None:
            from cascadebreaker.sidecar.mesh.nats_bus import NatsBus

            self.nats = NatsBus(
                self.config.nats,
                self.config.namespace,
                self.service,
                self.runtime.routes,
                self._current,
                self._from_nats,
                lambda: self._count_rejected("malformed"),
                self.config.max_clock_skew,
            )
            self.nats.start()
            self.buses.append(self.nats)
        for upstream, address in self.config.peers.items():
            self.peer_seen(upstream, address)
        self._tasks.append(self.loop.create_task(self._housekeeping()))

    def close(self) -> None:
        """Stop every task and stream."""
        for task in self._tasks:
            task.cancel()
        self.peers.close()
        for bus in self.buses:
            bus.close()

    def drain(self) -> None:
        """The sidecar is shutting down: end our Watch streams (they never end on their own)."""
        self.hub.close()

    # -- inputs -----------------------------------------------------------------------------

    def _watch_endpoint_breaker(
        self, upstream: str, endpoint: str, breaker: CircuitBreaker
    ) -> None:
        method, _, template = endpoint.partition(" ")
        self._watch_breaker(Endpoint(upstream, method, template), breaker)

    def _watch_breaker(self, upstream: Target, breaker: CircuitBreaker) -> None:
        def on_transition(event: Any) -> None:
            to_state = str(getattr(event.to_state, "value", event.to_state))
            why = str(getattr(event, "reason", "") or "")
            if threading.get_ident() == self._loop_thread:
                # After the call that moved it is done: its failure, noted by the response
                # hook right after the breaker recorded it, is evidence the rule waits for.
                self.loop.call_soon(self._breaker_moved, upstream, breaker, to_state, why)
            else:  # a shared store may report transitions from its own thread
                self.loop.call_soon_threadsafe(
                    self._breaker_moved, upstream, breaker, to_state, why
                )

        breaker.add_listener(on_transition)

    def _breaker_moved(
        self, upstream: Target, breaker: CircuitBreaker, to_state: str, why: str
    ) -> None:
        if to_state.upper() == "OPEN":
            reason = refusal_reason(why).value  # circuit_open | forced_open
            self.send(self.table.breaker_opened(upstream, breaker.retry_after, reason))
        else:  # HALF_OPEN (open_wait_over), CLOSED (probes_succeeded, reset)
            self.send(self.table.breaker_recovered(upstream, why or Reason.RECOVERED.value))

    def _open_waits_over(self) -> None:
        """Announce roots whose breaker's open wait ran out on its own: an OPEN circuit reads
        OPEN until the next call moves it to HALF_OPEN, but it admits that call (a probe), so
        callers may try again now, not only when they next call."""
        for target in self.table.open_roots():
            breaker = self._breaker_of(target)
            if breaker is not None and breaker.state is State.OPEN and breaker.retry_after <= 0:
                self.send(self.table.breaker_recovered(target, Reason.OPEN_WAIT_OVER.value))

    def _breaker_of(self, target: Target) -> CircuitBreaker | None:
        """The breaker of an upstream, or of one endpoint of it (`breaker.scope: endpoint`)."""
        if isinstance(target, str):
            route = self.runtime.routes.get(target)
            return route.breaker if route is not None else None
        route = self.runtime.routes.get(target.service)
        endpoints = getattr(route, "endpoints", None)
        if endpoints is None:
            return None
        return dict(endpoints.items()).get(f"{target.method} {target.template}")

    def _from_peer(self, update: AvailabilityUpdate, address: str) -> Verdict:
        self.stats["received_watch"] += 1
        if update.service != self.service and address not in self.peer_of.get(update.service, ()):
            # A sidecar speaks for its own service only: the one we subscribed to it for
            # (updates about our own service are the table's to refuse, and count as such).
            self._count_rejected(Verdict.WRONG_PEER.value)
            return Verdict.WRONG_PEER
        return self._receive(update)

    def _from_redis(self, update: AvailabilityUpdate) -> None:
        self._from_shared_bus(update, "redis")

    def _from_nats(self, update: AvailabilityUpdate) -> None:
        self._from_shared_bus(update, "nats")

    def _from_shared_bus(self, update: AvailabilityUpdate, via: str) -> None:
        if update.service == self.service:
            # A sibling replica's own endpoint: each derives its own from its breakers, but
            # answers when it can serve what the sibling cannot (dependents count it live).
            self.send(self.table.sibling_reported(update))
            return
        if update.service not in self.runtime.routes:
            # Not a service we call: nothing of ours can depend on it. A shared channel brings
            # the whole fleet's updates; keeping none of them bounds what this sidecar holds
            # (versions, instance reports) by its own upstreams, not by the fleet.
            self.stats[f"ignored_{via}"] += 1
            return
        self.stats[f"received_{via}"] += 1
        self._receive(update)

    def _receive(self, update: AvailabilityUpdate) -> Verdict:
        result = self.table.receive(update)
        self.send(result.updates)
        return result.verdict

    def _count_rejected(self, reason: str) -> None:
        self.stats[f"rejected_{reason}"] += 1

    def peer_seen(self, upstream: str, address: str) -> None:
        """A sidecar of `upstream` answered from `address`: subscribe to its Watch stream."""
        known = self.peer_of.setdefault(upstream, set())
        if address in known:
            return
        if self.advertise is not None and address.encode() == self.advertise:
            return  # ourselves (an app calling its own service)
        if len(known) >= MAX_PEERS_PER_UPSTREAM:
            _untrusted_claims(
                "cascade: %s already has %d sidecars watched; not watching %s",
                upstream,
                len(known),
                address,
            )
            return
        if self.peers.ensure(address):
            known.add(address)
            log.info("cascade: watching %s at %s", upstream, address)
        else:
            _untrusted_claims("cascade: not watching %s at %s (refused)", upstream, address)

    def peer_claim(self, caller_hop: str) -> bytes | None:
        """The `ccb-sidecar-grpc` value for a verified caller: our address and a token that
        binds it to the caller's hop token (None when we have no address to give)."""
        if self.advertise is None:
            return None
        address = self.advertise.decode()
        token = self.learner.trust.issue(self.service, time.time(), f"grpc|{address}|{caller_hop}")
        return f"{address} {token}".encode()

    def peer_claimed(self, upstream: str, value: bytes, sent_hop: str) -> None:
        """An upstream's response named its sidecar: watch it if the claim verifies (the token
        names `upstream`'s service and is bound to the hop token we sent)."""
        address, _, token = value.decode("latin-1").strip().partition(" ")
        route = self.runtime.routes.get(upstream)
        host = route.target.host if route is not None else None
        check = self.learner.trust.check(
            token.strip(),
            peer_host=host,
            now=time.time(),
            material=f"grpc|{address}|{sent_hop}",
        )
        if not check.trusted:
            reason = check.reason
        elif check.service != upstream:
            reason = f"the token is {check.service}'s"
        elif not valid_address(address):
            reason = "not host:port"
        else:
            self.peer_seen(upstream, address)
            return
        self.stats["untrusted_peer_claims"] += 1
        _untrusted_claims("cascade: ignored a sidecar address from %s: %s", upstream, reason)

    def _forget_peer(self, address: str) -> None:
        for addresses in self.peer_of.values():
            addresses.discard(address)

    # -- outputs ----------------------------------------------------------------------------

    def send(self, updates: Iterable[AvailabilityUpdate]) -> None:
        """Push our updates on every bus: subscribed callers' Watch streams, Redis."""
        updates = tuple(updates)
        if not updates:
            return
        self.stats["sent"] += len(updates)
        for bus in self.buses:
            bus.publish(updates)

    def refused(self, direction: str) -> None:
        """Count one call refused early."""
        self.stats[f"refused_{direction}"] += 1

    def _current(self, since_version: int) -> list[AvailabilityUpdate]:
        """What a new Watch subscriber hears first: our presence, then our endpoints' state."""
        return [self._presence(), *self.table.current(since_version)]

    def _presence(self) -> AvailabilityUpdate:
        return self.table.presence(self.config.presence_interval * 3)

    async def _housekeeping(self) -> None:
        last_sweep = last_presence = time.monotonic()
        while True:
            await asyncio.sleep(_HOUSEKEEPING)
            self._open_waits_over()  # before expire(): it would drop the roots silently
            self.table.expire()
            self.send(self.table.expire_instances())
            self.send(self.learner.settle())
            if time.monotonic() - last_presence >= self.config.presence_interval:
                last_presence = time.monotonic()
                if self.hub.subscribers:  # presence is for our Watch subscribers only
                    self.hub.publish((self._presence(),))
            if time.monotonic() - last_sweep >= _EDGE_SWEEP:
                last_sweep = time.monotonic()
                self.send(self.table.expire_edges())
                self.send(self._forget_evidence())

    def _forget_evidence(self) -> tuple[AvailabilityUpdate, ...]:
        """Edges whose evidence aged out are required again, as new edges are."""
        if self.ledger is None:
            return ()
        graph = self.table.graph
        callers = [c for c, d in self.ledger.expire() if graph.set_learned_optional(c, d, False)]
        return self.table.graph_changed(callers) if callers else ()

    # -- views ------------------------------------------------------------------------------

    def edges_to(self, callee: Endpoint) -> list[dict[str, Any]]:
        """Our edges to `callee` (to any endpoint of its service when it is service-wide), as
        `edges()` shows them, for `Check` and `/availability`."""
        wide = callee == Endpoint.service_wide(callee.service)
        return self.edges(
            lambda e: (
                e.callee == callee
                or e.caller == callee
                or (wide and callee.service in (e.callee.service, e.caller.service))
            )
        )

    def edges(self, keep: Callable[[Edge], bool] | None = None) -> list[dict[str, Any]]:
        """Every edge (that `keep` keeps) with its optionality (`required`, `optional
        (marked)`, `optional (learned)`) and the evidence of survival behind it."""
        graph = self.table.graph
        found = []
        for edge in graph.edges():
            if keep is not None and not keep(edge):
                continue
            evidence = (
                self.ledger.evidence(edge.caller, edge.callee) if self.ledger is not None else None
            )
            found.append(
                {
                    "caller": str(edge.caller),
                    "callee": str(edge.callee),
                    "required": edge.required,
                    "optionality": graph.optionality(edge.caller, edge.callee),
                    "evidence": {
                        "survived": round(evidence.survived, 2) if evidence else 0.0,
                        "failedWith": round(evidence.failed_with, 2) if evidence else 0.0,
                    },
                }
            )
        return found

    def rejected(self) -> dict[str, int]:
        """Rejected updates by reason (table verdicts and transport-level malformed ones)."""
        found: Counter[str] = Counter()
        for key, count in (*self.table.counters.items(), *self.stats.items()):
            if key.startswith("rejected_"):
                found[key.removeprefix("rejected_")] += count
        return dict(found)

    def check(self, endpoint: Endpoint) -> Unavailability | None:
        """Why `endpoint` (ours or a target) is unavailable now, or None."""
        return self.table.check(endpoint)

    def instances(self, endpoint: Endpoint) -> InstanceCount:
        """The live instances of a target endpoint and how many report it unavailable."""
        return self.table.instances(endpoint)

    def status(self) -> dict[str, Any]:
        """The `cascade` section of /status: graph, unavailable endpoints, peers, counters."""
        snapshot = self.table.snapshot()
        return {
            "secret": self.secret is not None,
            "learning": self.config.learning,
            "advertise": self.advertise.decode() if self.advertise else None,
            "instance": self.instance,
            "quorum": self.config.quorum,
            "unavailable": snapshot["unavailable"],
            # Target endpoints some live instance reports unavailable (partially when
            # available_fraction > 0).
            "instances": snapshot["instances"],
            "edges": self.edges(),
            "peers": {upstream: sorted(addresses) for upstream, addresses in self.peer_of.items()},
            "watching": self.peers.peers,  # Watch subscriptions held (or reconnecting)
            "reconnects": self.peers.reconnects,
            "untrusted_peer_claims": self.stats["untrusted_peer_claims"],
            "subscribers": self.hub.subscribers,
            "redis": None
            if self.redis is None
            else {
                "connected": self.redis.connected,
                "published": self.redis.published,
                "dropped": self.redis.dropped,
            },
            "nats": None
            if self.nats is None
            else {
                "connected": self.nats.connected,
                "published": self.nats.published,
                "received": self.nats.received,
                "dropped": self.nats.dropped,
                "reconnects": self.nats.reconnects,
                "syncs_answered": self.nats.syncs_answered,
            },
            "updates": {
                "sent": self.stats["sent"],
                "received": self.table.counters["received"],
                "accepted": self.table.counters["accepted"],
                "rejected": self.rejected(),
            },
            "refused": {
                "outbound": self.stats["refused_outbound"],
                "inbound": self.stats["refused_inbound"],
            },
            "trickled": self.learner.trickle.passed if self.learner.trickle else 0,
        }
