"""gRPC over TLS and mutual TLS: certificates made in the test (trustme), real grpcio clients,
real sidecars subscribing to each other, reloads on file change and on SIGHUP."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
import trustme
import yaml

from cascadebreaker.cascade import AvailabilityUpdate, Cause, Endpoint, sign
from cascadebreaker.sidecar.command import run_command
from cascadebreaker.sidecar.grpc.api import WatchSubscription, start_grpc_server
from cascadebreaker.sidecar.grpc.client import ClientTls, SidecarClient
from cascadebreaker.sidecar.grpc.tls import TlsError, installed_tls
from cascadebreaker.sidecar.mesh.node import CascadeNode
from cascadebreaker.sidecar.mesh.plugin import cascade_node
from cascadebreaker.sidecar.proxy.runtime import SidecarRuntime
from cascadebreaker.sidecar.schema import parse_config
from cascadebreaker.sidecar.server import SidecarServer, build_runtime

from .conftest import free_port

SECRET = "tls-test-secret"
CHARGES = Endpoint("payment", "POST", "/v1/charges")


@dataclass
class Identity:
    """A certificate and its key written to files, and the CA that signed it."""

    cert: Path
    key: Path
    ca: Path


def issue(ca: trustme.CA, directory: Path, name: str, *hosts: str) -> Identity:
    """Write `ca`'s certificate for `hosts` (default 127.0.0.1 and localhost) under `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    leaf = ca.issue_cert(*(hosts or ("127.0.0.1", "localhost")))
    identity = Identity(
        directory / f"{name}.pem", directory / f"{name}-key.pem", directory / "ca.pem"
    )
    identity.cert.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    identity.key.write_bytes(leaf.private_key_pem.bytes())
    ca.cert_pem.write_to_path(str(identity.ca))
    return identity


def replace_files(source: Identity, target: Identity) -> None:
    """Swap `target`'s files for `source`'s (each by rename, as a secret volume update does)."""
    for src, dst in ((source.cert, target.cert), (source.key, target.key), (source.ca, target.ca)):
        staged = dst.with_suffix(".new")
        staged.write_bytes(src.read_bytes())
        os.replace(staged, dst)


def tls_section(identity: Identity, **extra: Any) -> dict[str, Any]:
    return {"cert": str(identity.cert), "key": str(identity.key), "ca": str(identity.ca), **extra}


def config(upstream_url: str, grpc_port: int, tls: dict[str, Any] | None) -> Any:
    return parse_config(
        {
            "service": "checkout",
            "listen": {
                "outbound": None,
                "inbound": None,
                "admin": None,
                "grpc": f"127.0.0.1:{grpc_port}",
            },
            "upstreams": {"payment": {"url": upstream_url, "timeout": 5.0}},
            "grpc_tls": tls,
            "cascade": {"enabled": False},
        }
    )


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def other_ca() -> trustme.CA:
    """A CA nobody trusts."""
    return trustme.CA()


async def serve(upstream_url: str, tls: dict[str, Any]) -> tuple[Any, SidecarRuntime, str]:
    port = free_port()
    cfg = config(upstream_url, port, tls)
    runtime = build_runtime(cfg)
    server = await start_grpc_server(cfg, runtime)
    assert server is not None
    return server, runtime, f"127.0.0.1:{server.port}"


async def call_status(address: str, tls: ClientTls | None) -> int | grpc.StatusCode:
    """The HTTP status of `payment GET /` through the sidecar, or the gRPC error's code."""
    async with SidecarClient(address, tls=tls) as client:
        try:
            reply = await client.call("payment", "GET", "/", deadline=10)
        except grpc.aio.AioRpcError as error:
            return error.code()
        return int(reply.status)


async def test_call_and_check_over_tls(
    upstream_server: str, tmp_path: Path, ca: trustme.CA, other_ca: trustme.CA
) -> None:
    server_id = issue(ca, tmp_path / "server", "sidecar")
    stranger = issue(other_ca, tmp_path / "stranger", "x")
    server, runtime, address = await serve(upstream_server, tls_section(server_id))
    try:
        assert await call_status(address, ClientTls(ca=server_id.ca)) == 200
        async with SidecarClient(address, tls=ClientTls(ca=server_id.ca)) as client:
            assert (await client.check("payment")).available
        # A plaintext client and a client that trusts another CA get no connection.
        assert await call_status(address, None) == grpc.StatusCode.UNAVAILABLE
        assert await call_status(address, ClientTls(ca=stranger.ca)) == grpc.StatusCode.UNAVAILABLE
        # The name on the certificate is checked: a name it does not carry fails...
        wrong_name = ClientTls(ca=server_id.ca, server_name="payment.internal")
        assert await call_status(address, wrong_name) == grpc.StatusCode.UNAVAILABLE
        # ...and `server_name` picks the one to check when the address is not on it.
        named = issue(ca, tmp_path / "named", "sidecar", "sidecar.ccb")
        await server.stop(None)
        runtime.close()
        server, runtime, address = await serve(upstream_server, tls_section(named))
        renamed = ClientTls(ca=named.ca, server_name="sidecar.ccb")
        assert await call_status(address, renamed) == 200
        assert await call_status(address, ClientTls(ca=named.ca)) == grpc.StatusCode.UNAVAILABLE
        assert runtime.status()["grpc_tls"]["client_auth"] is False
    finally:
        await server.stop(None)
        runtime.close()


async def test_mutual_tls_admits_only_clients_with_a_certificate_from_the_ca(
    upstream_server: str, tmp_path: Path, ca: trustme.CA, other_ca: trustme.CA
) -> None:
    server_id = issue(ca, tmp_path / "server", "sidecar")
    client_id = issue(ca, tmp_path / "client", "app", "app.ccb")
    forged = issue(other_ca, tmp_path / "forged", "app", "app.ccb")
    server, runtime, address = await serve(
        upstream_server, tls_section(server_id, client_auth=True)
    )
    try:
        ok = ClientTls(ca=server_id.ca, cert=client_id.cert, key=client_id.key)
        assert await call_status(address, ok) == 200
        no_cert = ClientTls(ca=server_id.ca)
        assert await call_status(address, no_cert) == grpc.StatusCode.UNAVAILABLE
        wrong_ca = ClientTls(ca=server_id.ca, cert=forged.cert, key=forged.key)
        assert await call_status(address, wrong_ca) == grpc.StatusCode.UNAVAILABLE
        assert runtime.status()["grpc_tls"]["client_auth"] is True
    finally:
        await server.stop(None)
        runtime.close()


async def _until(predicate: Callable[[], Any], what: str, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def test_files_changed_on_disk_are_picked_up_and_a_bad_set_keeps_the_old(
    upstream_server: str, tmp_path: Path, ca: trustme.CA, other_ca: trustme.CA
) -> None:
    live = issue(ca, tmp_path / "live", "sidecar")
    old_client = issue(ca, tmp_path / "old-client", "app")
    new_server = issue(other_ca, tmp_path / "new", "sidecar")
    new_client = issue(other_ca, tmp_path / "new-client", "app")
    tls = tls_section(live, client_auth=True, reload_interval=0.05)
    server, runtime, address = await serve(upstream_server, tls)
    watcher = installed_tls(runtime)
    assert watcher is not None
    old = ClientTls(ca=old_client.ca, cert=old_client.cert, key=old_client.key)
    new = ClientTls(ca=new_client.ca, cert=new_client.cert, key=new_client.key)
    try:
        assert await call_status(address, old) == 200
        replace_files(new_server, live)  # a new CA for both sides: a rotation
        await _until(lambda: watcher.reloads >= 1 and watcher.last_error is None, "a reload")
        assert await call_status(address, new) == 200
        assert await call_status(address, old) == grpc.StatusCode.UNAVAILABLE
        # A half-written or wrong set is refused, logged, counted; the last good set stays.
        failed = watcher.failed_reloads
        live.key.write_bytes(old_client.key.read_bytes())  # a key of another certificate
        await _until(lambda: watcher.failed_reloads > failed, "a failed reload")
        status = runtime.status()["grpc_tls"]
        assert status["last_error"].startswith("grpc_tls.key: ")
        assert "does not match grpc_tls.cert" in status["last_error"]
        assert await call_status(address, new) == 200
    finally:
        await server.stop(None)
        runtime.close()


def test_sighup_reloads_the_certificates_of_a_running_sidecar(
    upstream_server: str, tmp_path: Path, ca: trustme.CA, other_ca: trustme.CA
) -> None:
    live = issue(ca, tmp_path / "live", "sidecar")
    rotated = issue(other_ca, tmp_path / "rotated", "sidecar")
    grpc_port, admin_port = free_port(), free_port()
    path = tmp_path / "sidecar.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "service": "checkout",
                "listen": {
                    "outbound": None,
                    "inbound": None,
                    "grpc": f"127.0.0.1:{grpc_port}",
                    "admin": f"127.0.0.1:{admin_port}",
                },
                "upstreams": {"payment": {"url": upstream_server}},
                "grpc_tls": tls_section(live, reload_interval=3600),  # only SIGHUP reloads
            }
        )
    )
    log = tmp_path / "sidecar.log"
    env = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"}
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "cascadebreaker.cli", "sidecar", "--config", str(path)],
            stderr=sink,
            env=env,
        )
    address = f"127.0.0.1:{grpc_port}"
    try:
        deadline = time.monotonic() + 30
        while asyncio.run(call_status(address, ClientTls(ca=live.ca))) != 200:
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the sidecar did not serve TLS"
            time.sleep(0.1)
        replace_files(rotated, live)
        assert (
            asyncio.run(call_status(address, ClientTls(ca=rotated.ca)))
            == grpc.StatusCode.UNAVAILABLE
        )
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while asyncio.run(call_status(address, ClientTls(ca=rotated.ca))) != 200:
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "SIGHUP did not reload the certificates"
            time.sleep(0.1)
        for _ in range(5):  # plaintext at the TLS port, as a scanner would
            with socket.create_connection(("127.0.0.1", grpc_port), timeout=10) as sock:
                sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
                while sock.recv(4096):
                    pass
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0
    text = log.read_text()
    assert "gRPC TLS reloaded" in text
    assert "Traceback" not in text
    # Failed handshakes (plaintext, a client trusting the other CA) leave no line each: any
    # client could fill the log with them.
    assert "Handshake failed" not in text, text


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t, i: {**t, "cert": str(i.cert) + ".missing"}, r"^grpc_tls\.cert: cannot read "),
        (lambda t, i: {**t, "key": str(i.ca)}, r"^grpc_tls\.key: no PEM private key in "),
        (lambda t, i: {**t, "key": str(i.other_key)}, r"^grpc_tls\.key: .* does not match "),
        (lambda t, i: {**t, "ca": str(i.key)}, r"^grpc_tls\.ca: no PEM certificate in "),
        (lambda t, i: {**t, "cert": str(i.key)}, r"^grpc_tls\.cert: no PEM certificate in "),
        (
            lambda t, i: {k: v for k, v in t.items() if k != "ca"} | {"client_auth": True},
            r"^grpc_tls\.ca: required with grpc_tls\.client_auth",
        ),
        (lambda t, i: {k: v for k, v in t.items() if k != "key"}, r"^grpc_tls\.key: required"),
        (lambda t, i: {**t, "reload_interval": 0}, r"^grpc_tls\.reload_interval: must be > 0"),
        (lambda t, i: {**t, "crt": "x"}, r"^grpc_tls\.crt: unknown key"),
    ],
)
def test_config_errors_name_the_key(
    tmp_path: Path,
    ca: trustme.CA,
    capsys: pytest.CaptureFixture[str],
    change: Callable[[dict[str, Any], Any], dict[str, Any]],
    message: str,
) -> None:
    identity = issue(ca, tmp_path, "sidecar")
    other = issue(ca, tmp_path / "other", "other")
    files = SimpleNamespace(cert=identity.cert, key=identity.key, ca=identity.ca)
    files.other_key = other.key
    section = change(tls_section(identity), files)
    path = tmp_path / "sidecar.yaml"
    path.write_text(
        yaml.safe_dump({"service": "checkout", "listen": {"inbound": None}, "grpc_tls": section})
    )
    code = run_command(argparse.Namespace(config=str(path), listen=[]))
    assert code == 2
    error = capsys.readouterr().err.strip().split(": ", 2)[2]  # after "...invalid config FILE: "
    assert re.search(message, error), error


def test_a_client_names_its_bad_field(tmp_path: Path) -> None:
    with pytest.raises(TlsError, match=r"^ClientTls\.ca: cannot read "):
        ClientTls(ca=tmp_path / "none.pem").channel("127.0.0.1:1")
    with pytest.raises(TlsError, match=r"^ClientTls\.key: required with ClientTls\.cert"):
        ClientTls(cert=tmp_path / "none.pem").channel("127.0.0.1:1")


# -- peers: Watch subscriptions between sidecars ---------------------------------------------


@pytest.fixture
def mesh_ca(tmp_path: Path, ca: trustme.CA) -> Callable[[str], Identity]:
    """Issues a sidecar identity (certificate for 127.0.0.1) from the mesh's CA."""
    return lambda name: issue(ca, tmp_path / name, name)


async def _sidecar(service: str, cfg: dict[str, Any]) -> SidecarServer:
    listen = {"outbound": None, "inbound": None, "admin": None, "grpc": f"127.0.0.1:{free_port()}"}
    server = SidecarServer(parse_config({"service": service, "listen": listen, **cfg}))
    await server.start()
    return server


def _node(server: SidecarServer) -> CascadeNode:
    assert server.runtime is not None
    node = cascade_node(server.runtime)
    assert node is not None
    return node


async def test_peers_watch_each_other_over_mutual_tls(
    mesh_ca: Callable[[str], Identity],
) -> None:
    """payment's ledger breaker opens; checkout, subscribed over mutual TLS, learns that
    `payment POST /v1/charges` is unavailable; a plaintext subscriber gets nothing."""
    payment_id, checkout_id = mesh_ca("payment"), mesh_ca("checkout")
    dead = f"http://127.0.0.1:{free_port()}"
    payment = await _sidecar(
        "payment",
        {
            "upstreams": {"ledger": {"url": dead, "breaker": {"failure_threshold": 1}}},
            "grpc_tls": tls_section(payment_id, client_auth=True),
            "cascade": {
                "secret": SECRET,
                "edges": [{"caller": "payment POST /v1/charges", "callee": "ledger GET /"}],
            },
        },
    )
    payment_grpc = f"127.0.0.1:{payment.config.listen.grpc.port}"  # type: ignore[union-attr]
    checkout = await _sidecar(
        "checkout",
        {
            "upstreams": {"payment": {"url": dead}},
            "grpc_tls": tls_section(checkout_id, client_auth=True),
            "cascade": {"secret": SECRET, "peers": {"payment": payment_grpc}},
        },
    )
    plaintext = await _sidecar(
        "gateway",
        {
            "upstreams": {"payment": {"url": dead}},
            "cascade": {"secret": SECRET, "peers": {"payment": payment_grpc}},
        },
    )
    assert payment.runtime and checkout.runtime and plaintext.runtime
    payment_node, checkout_node, plaintext_node = map(_node, (payment, checkout, plaintext))
    try:
        await _until(lambda: payment_node.hub.subscribers == 1, "checkout's Watch stream")
        with pytest.raises(Exception):  # noqa: B017, PT011 - any upstream error
            await payment.runtime.call("ledger", "GET", "/")
        await _until(lambda: checkout_node.check(CHARGES) is not None, "the update over TLS")
        await _until(lambda: plaintext_node.peers.reconnects >= 3, "plaintext retries")
        assert plaintext_node.check(CHARGES) is None
        assert payment_node.hub.subscribers == 1  # checkout's; never the plaintext one
    finally:
        for server in (plaintext, checkout, payment):
            await server.stop()


async def test_a_leaked_certificate_alone_cannot_forge_availability(
    mesh_ca: Callable[[str], Identity], upstream_server: str
) -> None:
    """A rogue server holding a valid mesh certificate but not the secret: checkout connects to
    it (TLS is satisfied) and refuses every update it sends (unsigned or badly signed)."""
    rogue_id, checkout_id = mesh_ca("rogue"), mesh_ca("checkout")
    now_us = time.time_ns() // 1000
    chain = (Cause(Endpoint.service_wide("ledger"), "circuit open"), Cause(CHARGES, "requires"))
    unsigned = AvailabilityUpdate("payment", CHARGES, False, chain, time.time() + 30, now_us)
    forged = sign(
        AvailabilityUpdate("payment", CHARGES, False, chain, time.time() + 30, now_us + 1),
        b"a guessed secret",
    )
    served: list[WatchSubscription] = []

    async def rogue_source(subscription: WatchSubscription) -> AsyncIterator[AvailabilityUpdate]:
        served.append(subscription)
        yield unsigned
        yield forged
        await asyncio.Event().wait()

    rogue_port = free_port()
    rogue_config = config(upstream_server, rogue_port, tls_section(rogue_id, client_auth=True))
    rogue_runtime = build_runtime(rogue_config)
    rogue = await start_grpc_server(rogue_config, rogue_runtime, update_source=rogue_source)
    assert rogue is not None
    checkout = await _sidecar(
        "checkout",
        {
            "upstreams": {"payment": {"url": upstream_server}},
            "grpc_tls": tls_section(checkout_id, client_auth=True),
            "cascade": {"secret": SECRET, "peers": {"payment": f"127.0.0.1:{rogue_port}"}},
        },
    )
    node = _node(checkout)
    try:
        await _until(lambda: sum(node.rejected().values()) >= 2, "both updates refused")
        assert served, "the rogue's TLS was accepted (the test needs the stream to open)"
        assert node.rejected() == {"unsigned": 1, "bad_signature": 1}
        assert node.check(CHARGES) is None
    finally:
        await checkout.stop()
        await rogue.stop(None)
        rogue_runtime.close()
