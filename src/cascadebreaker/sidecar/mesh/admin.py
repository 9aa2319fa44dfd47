"""The cascade on the admin port: `GET /availability` and Prometheus metrics.

    GET /availability?endpoint=POST%20/v1/orders                  one of our endpoints
    GET /availability?upstream=payment&endpoint=POST%20/v1/charges  a target endpoint
    GET /availability?upstream=payment                            the whole upstream

An orchestrator asks before the first step of a saga and refuses it when the answer is no.
`availableFraction` and `liveInstances` say how many replicas of the target can serve it: an
endpoint some (not all) live instances report unavailable is available, partially.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from cascadebreaker import State
from cascadebreaker.cascade import Cause, Endpoint
from cascadebreaker.cascade.updates import chain_to_list
from cascadebreaker.contract import (
    CAUSE_CHAIN,
    CIRCUIT_STATE,
    RETRY_AFTER,
    json_seconds,
    refusal_reason,
)

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from cascadebreaker.sidecar.mesh.node import CascadeNode

__all__ = ["CascadeCollector", "availability_route"]


def availability_route(node: CascadeNode) -> Callable[[str], tuple[int, dict[str, Any]]]:
    """The admin handler of `/availability` (query string -> status, JSON)."""

    def answer(query: str) -> tuple[int, dict[str, Any]]:
        params = {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items()}
        upstream = params.get("upstream")
        text = params.get("endpoint", "").strip()
        method, _, path = text.partition(" ")
        if text and (not method or not path.startswith("/")):
            return 400, {"error": "endpoint must be 'METHOD /route'", "endpoint": text}
        if upstream is None and not text:
            return 400, {"error": "give endpoint=METHOD /route and/or upstream=name"}
        service = upstream or node.service
        if upstream is not None and upstream not in node.runtime.routes:
            return 404, {"error": "unknown upstream", "upstream": upstream}
        if text:
            endpoint = node.templates.endpoint(service, method.upper(), path)
        else:
            endpoint = Endpoint.service_wide(service)
        chain: tuple[Cause, ...] = ()
        wait = 0.0
        unavailable = node.check(endpoint)
        if unavailable is not None:
            chain = unavailable.cause_chain
            wait = max(unavailable.expires_at - time.time(), 0.0)
        if upstream is not None and not chain:
            breaker = node.runtime.routes[upstream].breaker
            if breaker is not None and breaker.state is State.OPEN and breaker.retry_after > 0:
                reason = refusal_reason(breaker.snapshot().reason)
                chain = (Cause(Endpoint.service_wide(upstream), reason.value),)
                wait = breaker.retry_after
        share = node.instances(endpoint)
        answer = {"endpoint": str(endpoint), "available": not chain}
        answer["availableFraction"] = round(share.fraction, 4)
        answer["liveInstances"] = share.live
        if upstream is not None:
            breaker = node.runtime.routes[upstream].breaker
            if breaker is not None:
                answer[CIRCUIT_STATE] = breaker.state.value
        answer[CAUSE_CHAIN] = chain_to_list(chain)
        answer[RETRY_AFTER] = json_seconds(wait) if chain else 0.0
        # The learned edges from (ours) or to (a target) this endpoint, with optionality.
        answer["edges"] = node.edges_to(endpoint)
        return 200, answer

    return answer


class CascadeCollector:
    """Updates sent, received, rejected (by reason), calls refused early; read at scrape time.

    A prometheus_client `Collector` by shape: the library loads at the first scrape."""

    def __init__(self, node: CascadeNode) -> None:
        self.node = node

    def collect(self) -> Iterator[Metric]:
        """The cascade's counters and gauges."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        node = self.node
        sent = CounterMetricFamily(
            "ccb_cascade_updates_sent", "Availability updates sent about our endpoints"
        )
        sent.add_metric([], node.stats["sent"])
        received = CounterMetricFamily(
            "ccb_cascade_updates_received", "Availability updates received", labels=["via"]
        )
        received.add_metric(["watch"], node.stats["received_watch"])
        received.add_metric(["redis"], node.stats["received_redis"])
        received.add_metric(["nats"], node.stats["received_nats"])
        accepted = CounterMetricFamily(
            "ccb_cascade_updates_accepted", "Received updates that were applied"
        )
        accepted.add_metric([], node.table.counters["accepted"])
        rejected = CounterMetricFamily(
            "ccb_cascade_updates_rejected", "Received updates rejected", labels=["reason"]
        )
        for reason, count in sorted(node.rejected().items()):
            rejected.add_metric([reason], count)
        refused = CounterMetricFamily(
            "ccb_cascade_refused_early",
            "Calls refused because an endpoint is known unavailable",
            labels=["direction"],
        )
        refused.add_metric(["outbound"], node.stats["refused_outbound"])
        refused.add_metric(["inbound"], node.stats["refused_inbound"])
        gauges = GaugeMetricFamily(
            "ccb_cascade_unavailable_endpoints", "Endpoints known unavailable now"
        )
        gauges.add_metric([], len(node.table.unavailable()))
        fraction = GaugeMetricFamily(
            "ccb_cascade_available_fraction",
            "Of a target endpoint's live instances, the fraction not reporting it unavailable "
            "(only endpoints some live instance reports unavailable)",
            labels=["endpoint"],
        )
        for row in node.table.instance_view():
            fraction.add_metric([row["endpoint"]], row["available_fraction"])
        edges = GaugeMetricFamily("ccb_cascade_edges", "Edges in the dependency graph")
        edges.add_metric([], len(node.graph))
        peers = GaugeMetricFamily("ccb_cascade_peers", "Watch streams", labels=["side"])
        peers.add_metric(["subscribed"], len(node.peers.peers))
        peers.add_metric(["subscribers"], node.hub.subscribers)
        yield from (sent, received, accepted, rejected, refused, gauges, fraction, edges, peers)
