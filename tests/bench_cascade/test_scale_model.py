"""The scale model of `python -m bench cascade --scale` on a small fleet: what it counts is
what the buses' rules say, and a change reaches every dependent it must."""

from __future__ import annotations

from bench.cascade import scale


def test_the_graph_is_layered_and_acyclic() -> None:
    fleet = scale.build(200, 8, seed=3)
    for service, ups in fleet.upstreams.items():
        assert all(fleet.layer[up] < fleet.layer[service] for up in ups)
        assert all(service in fleet.callers[up] for up in ups)
    assert max(fleet.layer.values()) == 7


def test_watch_and_nats_reach_dependents_only_redis_reaches_the_fleet() -> None:
    result = scale.measure_size(120, 6, changes=6, hop_ms=0.5, seed=5)
    for bus in ("watch", "nats"):
        for cost in result.costs[bus]:
            assert cost.messages == cost.useful  # every delivery to a dependent
    watch, redis = result.costs["watch"], result.costs["redis"]
    for w, r in zip(watch, redis, strict=True):
        # Same change, same dependents told; Redis also told everybody else.
        assert r.useful == w.useful
        assert r.dependents_flipped == w.dependents_flipped
        assert r.messages >= w.messages
    sent = [c for c in redis if c.useful]
    assert sent and all(c.messages > c.useful for c in sent)


def test_the_worst_root_changes_every_transitive_dependent() -> None:
    fleet = scale.build(60, 5, seed=11)
    root = max(
        (s for s in fleet.tables if fleet.upstreams[s] and fleet.callers[s]),
        key=lambda s: scale._transitive_callers(fleet, s),
    )
    cost = scale.one_change(fleet, root, fleet.upstreams[root][0], "watch", 0.5, 0.0)
    assert cost.dependents_flipped >= len(fleet.callers[root])
    assert cost.last_dependent_ms >= 0.5  # at least one hop
    # After the change the fleet is healthy again (the model resets it).
    assert all(not t.unavailable() for t in fleet.tables.values())
