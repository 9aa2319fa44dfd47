"""`ccb injector`: real AdmissionReview requests over TLS with a certificate made here."""

from __future__ import annotations

import base64
import http.client
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import trustme

from cascadebreaker.kube.inject import INJECT, NETINIT, SIDECAR, InjectOptions, inject_pod
from cascadebreaker.kube.injector import InjectorServer, json_patch
from tests.conftest import free_port
from tests.kube.k8s_schema import validate_strict


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def cert_files(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    # The name the API server would use: <service>.<namespace>.svc
    cert = ca.issue_cert("ccb-injector.ccb-system.svc", "127.0.0.1")
    folder = tmp_path_factory.mktemp("tls")
    chain, key = folder / "tls.crt", folder / "tls.key"
    cert.private_key_pem.write_to_path(str(key))
    chain.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    return str(chain), str(key)


@pytest.fixture(scope="module")
def injector(cert_files: tuple[str, str]) -> Iterator[InjectorServer]:
    server = InjectorServer(("127.0.0.1", 0), *cert_files, InjectOptions(image="ccb:test"))
    server.start_background()
    yield server
    server.shutdown()
    server.server_close()


def client_context(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


def post(port: int, ca: trustme.CA, body: bytes, path: str = "/mutate") -> tuple[int, Any]:
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=client_context(ca), timeout=10)
    try:
        conn.request("POST", path, body=body, headers={"content-type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def pod(annotations: dict[str, str] | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "generateName": "payment-7d9f-",
        "namespace": "shop",
        "labels": {"app.kubernetes.io/name": "payment"},
    }
    if annotations is not None:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [{"name": "app", "image": "payment:1"}]},
    }


def admission_review(obj: dict[str, Any], uid: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid or str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "shop",
            "operation": "CREATE",
            "object": obj,
        },
    }


def test_annotated_pod_gets_a_json_patch_that_injects(injector: InjectorServer, ca: Any) -> None:
    original = pod({INJECT: "enabled"})
    uid = str(uuid.uuid4())
    status, answer = post(injector.port, ca, json.dumps(admission_review(original, uid)).encode())
    assert status == 200
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == uid and response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(response["patch"]))
    patched = jsonpatch.apply_patch(original, patch)  # an independent RFC 6902 implementation
    names = [c["name"] for c in patched["spec"]["initContainers"]]
    assert names == [NETINIT, SIDECAR]
    assert patched["spec"]["initContainers"][1]["image"] == "ccb:test"
    # same result as `ccb inject` on that pod
    expected = json.loads(json.dumps(original))
    inject_pod(expected, expected["metadata"], InjectOptions(image="ccb:test"))
    assert patched == expected
    validate_strict(patched)


def test_unannotated_pod_is_allowed_unchanged(injector: InjectorServer, ca: Any) -> None:
    status, answer = post(injector.port, ca, json.dumps(admission_review(pod(None))).encode())
    assert status == 200
    assert answer["response"]["allowed"] is True
    assert "patch" not in answer["response"]


def test_pod_that_cannot_be_injected_is_admitted_with_a_warning(
    injector: InjectorServer, ca: Any
) -> None:
    bad = pod({INJECT: "enabled", "cascadebreaker.io/interception": "ebpf"})
    status, answer = post(injector.port, ca, json.dumps(admission_review(bad)).encode())
    assert status == 200 and answer["response"]["allowed"] is True
    assert "not injected" in answer["response"]["warnings"][0]
    assert "patch" not in answer["response"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "Expecting"),
        (b"[]", "AdmissionReview"),
        (
            json.dumps(
                {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}
            ).encode(),
            "v1",
        ),
        (
            json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(),
            "uid",
        ),
    ],
)
def test_malformed_reviews_get_400_and_the_server_lives_on(
    injector: InjectorServer, ca: Any, body: bytes, message: str
) -> None:
    status, answer = post(injector.port, ca, body)
    assert status == 400 and message in answer["error"]
    status, _ = post(injector.port, ca, json.dumps(admission_review(pod(None))).encode())
    assert status == 200


def test_plain_http_and_untrusted_clients_are_refused(injector: InjectorServer) -> None:
    conn = http.client.HTTPSConnection("127.0.0.1", injector.port, timeout=10)  # default trust
    with pytest.raises(ssl.SSLCertVerificationError):
        conn.request("GET", "/healthz")
    conn.close()


def test_patch_creates_missing_parents() -> None:
    before = {"spec": {"containers": [{"name": "a"}]}}
    after = {"metadata": {"annotations": {"x": "y"}}, "spec": {"containers": [{"name": "a"}]}}
    assert jsonpatch.apply_patch(before, json_patch(before, after)) == after


def test_injector_command_serves_until_sigterm(cert_files: tuple[str, str], ca: Any) -> None:
    port = free_port()
    cert, key = cert_files
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cascadebreaker.cli",
            "injector",
            "--tls-cert",
            cert,
            "--tls-key",
            key,
            "--listen",
            f"127.0.0.1:{port}",
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = http.client.HTTPSConnection(
                    "127.0.0.1", port, context=client_context(ca), timeout=5
                )
                conn.request("GET", "/healthz")
                assert conn.getresponse().status == 200
                conn.close()
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline, "injector did not start"
                time.sleep(0.1)
        status, answer = post(
            port, ca, json.dumps(admission_review(pod({INJECT: "enabled"}))).encode()
        )
        assert status == 200 and answer["response"]["patchType"] == "JSONPatch"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_injector_command_with_a_missing_key_fails_clearly(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "cascadebreaker.cli",
            "injector",
            "--tls-cert",
            str(tmp_path / "no.crt"),
            "--tls-key",
            str(tmp_path / "no.key"),
            "--listen",
            "127.0.0.1:0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1 and "ccb injector:" in result.stderr
