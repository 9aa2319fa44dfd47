"""RedisStore on a real local Redis Cluster (three masters, three replicas, started here):
hash-tagged keys, breakers shared across "processes", and a failover of the master holding a
breaker with no exception reaching a caller."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator

import pytest

from cascadebreaker import CircuitBreaker, CircuitOpenError, RedisStore, State

from .cluster import LocalCluster, local_cluster
from .conftest import eventually

pytestmark = [pytest.mark.redis, pytest.mark.slow]


class Down(Exception):
    """The guarded call's own failure."""


def boom() -> None:
    raise Down


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with local_cluster() as running:
        yield running


@pytest.fixture
def stores(cluster: LocalCluster) -> Iterator[tuple[RedisStore, RedisStore]]:
    """Two stores (two processes of a fleet) on the cluster, in a fresh namespace."""
    namespace = f"c-{uuid.uuid4().hex[:8]}"
    pair = (
        RedisStore.from_url(cluster.url, namespace=namespace),
        RedisStore.from_url(cluster.url, namespace=namespace),
    )
    for store in pair:
        assert store.wait_ready(10.0)
    yield pair
    for store in pair:
        store.close()


def breaker(store: RedisStore, name: str) -> CircuitBreaker:
    return CircuitBreaker(name, failure_threshold=3, recovery_timeout=30, store=store)


def test_each_breaker_key_is_hash_tagged_into_one_slot(
    cluster: LocalCluster, stores: tuple[RedisStore, RedisStore]
) -> None:
    store = stores[0]
    assert store.cluster
    key = store.key("payment")
    assert key == f"ccb:{{{store.namespace}:payment}}"
    tag = f"{store.namespace}:payment"
    port = cluster.live()[0].port
    assert cluster.cli(port, "CLUSTER", "KEYSLOT", key) == cluster.cli(
        port, "CLUSTER", "KEYSLOT", tag
    )
    breaker(store, "payment").call(lambda: None)
    eventually(lambda: store.client.exists(key) == 1, 5, "the breaker's hash written")


def test_a_trip_in_one_process_opens_the_breaker_in_the_other(
    stores: tuple[RedisStore, RedisStore],
) -> None:
    a, b = (breaker(s, "courier") for s in stores)
    for _ in range(3):
        with pytest.raises(Down):
            a.call(boom)
    assert a.state is State.OPEN
    eventually(lambda: b.state is State.OPEN, 10, "the other process sees OPEN")
    with pytest.raises(CircuitOpenError):
        b.call(lambda: None)


def test_failover_of_the_master_holding_a_breaker_leaks_nothing_to_callers(
    cluster: LocalCluster, stores: tuple[RedisStore, RedisStore]
) -> None:
    a, b = (breaker(s, "shipping") for s in stores)
    a.call(lambda: None)
    key = stores[0].key("shipping")
    master = cluster.master_of(key)
    assert master is not None
    eventually(
        lambda: "master_link_status:up" in _replica_info(cluster, master), 20, "replica in sync"
    )
    cluster.kill(master)
    promoted: list[int | None] = []

    def failed_over() -> bool:
        # Callers keep calling through the failover: only their own outcomes come back.
        for guarded in (a, b):
            with contextlib.suppress(CircuitOpenError):
                guarded.call(lambda: None)
        if not cluster.healthy():
            return False
        promoted.append(cluster.master_of(key))
        # A live master other than the killed one serves the breaker's slot.
        return promoted[-1] not in (None, master)

    eventually(failed_over, 30, "the replica promoted")
    # The fleet shares the breaker again, through the promoted master.
    for _ in range(3):
        with pytest.raises(Down):
            a.call(boom)
    eventually(lambda: b.state is State.OPEN, 20, "the other process sees OPEN after failover")
    eventually(lambda: all(s.online for s in stores), 20, "both stores back online")


def _replica_info(cluster: LocalCluster, master: int) -> str:
    """INFO replication of the replica of `master` ("" while there is none)."""
    for line in cluster.cli(master, "CLUSTER", "NODES").splitlines():
        parts = line.split()
        if "myself" in parts[2]:
            me = parts[0]
            break
    else:
        return ""
    for line in cluster.cli(master, "CLUSTER", "NODES").splitlines():
        parts = line.split()
        if "slave" in parts[2] and parts[3] == me:
            port = int(parts[1].split("@")[0].rsplit(":", 1)[1])
            return cluster.cli(port, "INFO", "replication")
    return ""


async def test_the_cascade_bus_runs_on_the_cluster(cluster: LocalCluster) -> None:
    """`store: redis+cluster://` also carries the cascade's updates (pub/sub through a node)."""
    from cascadebreaker.cascade import AvailabilityUpdate, Cause, Endpoint
    from cascadebreaker.sidecar.mesh.redis_bus import RedisBus

    heard: list[AvailabilityUpdate] = []
    namespace = f"c-{uuid.uuid4().hex[:8]}"
    sender = RedisBus(cluster.url, namespace, lambda u: None, lambda: None)
    listener = RedisBus(cluster.url, namespace, heard.append, lambda: None)
    sender.start()
    listener.start()
    try:
        deadline = asyncio.get_running_loop().time() + 15
        while not (sender.connected and listener.connected):
            assert asyncio.get_running_loop().time() < deadline, "buses connected"
            await asyncio.sleep(0.05)
        endpoint = Endpoint("B", "GET", "/b")
        chain = (Cause(Endpoint.service_wide("Z"), "circuit open"), Cause(endpoint, "requires"))
        update = AvailabilityUpdate(
            "B", endpoint, False, chain, round(time.time() + 30, 3), 1, instance="b-1"
        )
        sender.publish([update])
        while heard != [update]:
            assert asyncio.get_running_loop().time() < deadline, "the update heard"
            await asyncio.sleep(0.05)
    finally:
        sender.close()
        listener.close()
