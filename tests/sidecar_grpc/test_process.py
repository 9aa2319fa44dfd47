"""The gRPC API of a real `ccb sidecar` process, called with a blocking grpcio client."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator

import grpc
import pytest

from cascadebreaker.sidecar.grpc.messages import REJECTION_METADATA
from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2 as pb
from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2_grpc

from .conftest import SidecarProcess


@pytest.fixture
def stub(sidecar_process: SidecarProcess) -> Iterator[sidecar_pb2_grpc.SidecarStub]:
    with grpc.insecure_channel(sidecar_process.grpc_address) as channel:
        yield sidecar_pb2_grpc.SidecarStub(channel)


def test_call_trip_and_check_through_the_sidecar_process(
    stub: sidecar_pb2_grpc.SidecarStub, sidecar_process: SidecarProcess
) -> None:
    """Success, two recorded 500s, then UNAVAILABLE with a Rejection; Check agrees."""
    ok = stub.Call(pb.CallRequest(upstream="payment", path="/v1/charges/1"), timeout=10)
    assert ok.status == 200
    assert json.loads(ok.body)["path"] == "/v1/charges/1"
    for _ in range(2):
        failed = stub.Call(pb.CallRequest(upstream="payment", path="/status/500"), timeout=10)
        assert failed.status == 500
    with pytest.raises(grpc.RpcError) as caught:
        stub.Call(pb.CallRequest(upstream="payment", path="/"), timeout=10)
    error = caught.value
    assert error.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
    trailers = dict(error.trailing_metadata())  # type: ignore[attr-defined]
    rejection = pb.Rejection.FromString(trailers[REJECTION_METADATA])
    assert rejection.circuit_state == pb.CIRCUIT_STATE_OPEN
    check = stub.Check(pb.CheckRequest(upstream="payment"), timeout=10)
    assert not check.available
    assert check.circuit_state == pb.CIRCUIT_STATE_OPEN
    assert sidecar_process.stop() == 0


def test_sigterm_ends_a_watch_stream_with_unavailable_and_the_reconnect_rule(
    stub: sidecar_pb2_grpc.SidecarStub, sidecar_process: SidecarProcess
) -> None:
    """A drained sidecar ends Watch with UNAVAILABLE (every client retries it), not OK, and
    says to reconnect with since_version."""
    stream = stub.Watch(pb.WatchRequest(subscriber_service="observer"), timeout=60)
    # The stream is open once the server has sent its headers.
    assert stream.initial_metadata() is not None
    sidecar_process.process.terminate()
    with pytest.raises(grpc.RpcError) as caught:
        for _ in stream:
            pass
    error = caught.value
    assert error.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
    assert "since_version" in error.details()  # type: ignore[attr-defined]
    assert sidecar_process.stop() == 0


def test_sigterm_repeated_while_draining_still_exits_cleanly(
    stub: sidecar_pb2_grpc.SidecarStub, sidecar_process: SidecarProcess
) -> None:
    """Supervisors repeat SIGTERM (and the test harness's stop() sends its own): a sidecar
    that is already draining, or tearing down after it, must still exit 0, never die by the
    signal's default action once its event loop has closed."""
    stream = stub.Watch(pb.WatchRequest(subscriber_service="observer"), timeout=60)
    assert stream.initial_metadata() is not None
    process = sidecar_process.process
    deadline = time.monotonic() + 30
    while process.poll() is None and time.monotonic() < deadline:
        process.send_signal(signal.SIGTERM)
        time.sleep(0.001)
    assert process.wait(timeout=15) == 0
