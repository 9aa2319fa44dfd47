"""A throwaway local Redis Cluster: three masters and three replicas on free loopback ports.

`redis-server --cluster-enabled yes` per node, `redis-cli --cluster create ... --cluster-yes`
to assign slots and replicas; a short node timeout so a killed master's replica is promoted
within a few seconds.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from cascadebreaker.testing import free_port

NODE_TIMEOUT_MS = 1000


@dataclass
class ClusterNode:
    port: int
    process: subprocess.Popen[bytes]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


@dataclass
class LocalCluster:
    nodes: list[ClusterNode]
    workdir: Path
    killed: list[int] = field(default_factory=list)

    @property
    def url(self) -> str:
        """What the store is given: any live node, as `redis+cluster://`."""
        return f"redis+cluster://127.0.0.1:{self.live()[0].port}"

    def live(self) -> list[ClusterNode]:
        return [n for n in self.nodes if n.process.poll() is None]

    def cli(self, port: int, *args: str) -> str:
        result = subprocess.run(
            ["redis-cli", "-p", str(port), *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        return result.stdout

    def master_of(self, key: str) -> int | None:
        """The port of the master that serves `key`'s slot now (as a live node sees it)."""
        slot = int(self.cli(self.live()[0].port, "CLUSTER", "KEYSLOT", key).strip())
        for line in self.cli(self.live()[0].port, "CLUSTER", "NODES").splitlines():
            parts = line.split()
            if "master" not in parts[2] or "fail" in parts[2]:
                continue
            port = int(parts[1].split("@")[0].rsplit(":", 1)[1])
            for spec in parts[8:]:
                low, _, high = spec.partition("-")
                if low.isdigit() and int(low) <= slot <= int(high or low):
                    return port
        return None  # between a master's failure and its replica's promotion

    def kill(self, port: int) -> None:
        next(n for n in self.nodes if n.port == port).kill()
        self.killed.append(port)

    def healthy(self) -> bool:
        """Every live node says the cluster is ok."""
        return all("cluster_state:ok" in self.cli(n.port, "CLUSTER", "INFO") for n in self.live())


def _spawn(port: int, workdir: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            f"nodes-{port}.conf",
            "--cluster-node-timeout",
            str(NODE_TIMEOUT_MS),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=(workdir / f"{port}.log").open("ab"),
        stderr=subprocess.STDOUT,
    )


def _bus_port_free(port: int) -> bool:
    """Whether the node's cluster bus port (port + 10000) can be bound now."""
    if port + 10000 >= 65536:
        return False
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port + 10000))
        except OSError:
            return False
    return True


def _answering(cluster: LocalCluster, ports: list[int]) -> bool:
    """Every node answers PING; a node that died (a port taken meanwhile) fails at once."""
    for node in cluster.nodes:
        if node.process.poll() is not None:
            log = (cluster.workdir / f"{node.port}.log").read_text(errors="replace")[-800:]
            raise RuntimeError(f"redis node {node.port} exited: {log}")
    return all("PONG" in cluster.cli(p, "PING") for p in ports)


def _until(predicate: object, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise TimeoutError(f"local cluster: {what}")


@contextmanager
def local_cluster() -> Iterator[LocalCluster]:
    """Start six nodes, make them a cluster (three masters with a replica each), tear down."""
    workdir = Path(tempfile.mkdtemp(prefix="ccb-cluster-"))
    ports: list[int] = []
    while len(ports) < 6:
        port = free_port()
        if port not in ports and _bus_port_free(port):  # the cluster bus is port + 10000
            ports.append(port)
    cluster = LocalCluster([ClusterNode(p, _spawn(p, workdir)) for p in ports], workdir)
    try:
        # A bound on a hang (start-up is slow on a loaded machine), not a timing claim.
        _until(lambda: _answering(cluster, ports), "nodes answering", 60)
        created = subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *(f"127.0.0.1:{p}" for p in ports),
                "--cluster-replicas",
                "1",
                "--cluster-yes",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if created.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {created.stdout[-2000:]}")
        _until(cluster.healthy, "cluster_state:ok on every node", 30)
        yield cluster
    finally:
        for node in cluster.nodes:
            node.kill()
        shutil.rmtree(workdir, ignore_errors=True)
