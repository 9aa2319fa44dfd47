"""Fuzz targets: one function per decoder, `bytes -> None`, raising only for a defect.

Each target feeds its input to a pure decoder and checks what came out:

- an input the decoder refuses must be refused with the decoder's own error (anything else
  would escape to a caller that does not expect it: a crash);
- an input it accepts must survive re-encoding on every wire it can travel (JSON over Redis,
  protobuf over Watch) and be decided (`verify`) without an exception;
- a valid, signed message must be accepted after the round trip (nothing valid is lost);
- a mutated signed message that still verifies must mean the same as the one signed (no
  forgery by mutation).

HTTP/1.1 framing (the sidecar's request reader and response framing) has its own targets in
framing.py, registered here.

The same functions run under atheris (`python -m bench fuzz`) and under hypothesis in the test
suite (tests/cascade/test_updates_fuzz.py), so the oracle is written once.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from google.protobuf.message import DecodeError

from bench.fuzz.draw import Draw
from cascadebreaker.cascade.endpoints import Endpoint
from cascadebreaker.cascade.updates import (
    AvailabilityUpdate,
    Cause,
    MalformedUpdate,
    Verdict,
    canonical_bytes,
    sign,
    verify,
)
from cascadebreaker.sidecar.grpc.messages import BadArgument, update_from_proto, update_to_proto
from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2 as pb

__all__ = ["SECRET", "TARGETS", "seeds", "update_json", "update_proto", "update_valid"]

SECRET = b"fuzz-secret"
NOW = 1_764_000_000.0  # fixed: a target's verdict must not depend on when it runs

_ROOT = Endpoint("ledger", "POST", "/v1/entries")
_SELF = Endpoint("payment", "POST", "/v1/charges/{id}")


def _seed_updates() -> list[AvailabilityUpdate]:
    chain = (Cause(_ROOT, "circuit open"), Cause(_SELF, "requires ledger POST /v1/entries"))
    down = AvailabilityUpdate("payment", _SELF, False, chain, NOW + 30, 1_764_000_000_000_001)
    up = AvailabilityUpdate("payment", _SELF, True, (), NOW + 60, 1_764_000_000_000_002)
    wide = Endpoint.service_wide("payment")
    whole = AvailabilityUpdate(
        "payment", wide, False, (Cause(wide, "circuit open"),), NOW + 5, 1_764_000_000_000_003
    )
    return [sign(u, SECRET) for u in (down, up, whole)]


_SIGNED = _seed_updates()
_SIGNED_MEANINGS = {canonical_bytes(u) for u in _SIGNED}


def seeds(target: str) -> list[bytes]:
    """Valid inputs a fuzzer starts from (mutations of these reach deep quickly)."""
    if target == "update_json":
        return [u.to_json() for u in _SIGNED]
    if target == "update_proto":
        return [update_to_proto(u).SerializeToString() for u in _SIGNED]
    return [bytes(range(64)), b"\x00" * 64, b"\xff" * 64]


def _decided(update: AvailabilityUpdate) -> Verdict:
    """`verify` must decide about anything a decoder returned; a signature that verifies must
    sign one of the meanings we signed (a mutation that keeps it valid is a forgery)."""
    verdict = verify(update, SECRET, now=NOW, receiver="checkout", max_skew=60)
    assert isinstance(verdict, Verdict)
    if verdict is Verdict.ACCEPTED:
        assert canonical_bytes(update) in _SIGNED_MEANINGS, f"forged: {update}"
    return verdict


def _same(a: AvailabilityUpdate, b: AvailabilityUpdate) -> None:
    assert a == b and a.signature == b.signature, (a, b)


def update_json(data: bytes) -> None:
    """The JSON wire (Redis pub/sub): refuse with MalformedUpdate, or carry on both wires."""
    try:
        update = AvailabilityUpdate.from_json(data)
    except MalformedUpdate:
        return
    _same(AvailabilityUpdate.from_json(update.to_json()), update)
    message = pb.AvailabilityUpdate.FromString(update_to_proto(update).SerializeToString())
    _same(update_from_proto(message), update)  # what Redis carries, Watch carries too
    _decided(update)


def update_proto(data: bytes) -> None:
    """The protobuf wire (Watch): refuse with DecodeError/BadArgument, or a verdict, never an
    exception; what passes the rules also travels as JSON."""
    try:
        message = pb.AvailabilityUpdate.FromString(data)
    except DecodeError:
        return
    try:
        update = update_from_proto(message)
    except BadArgument:
        return
    if update.problem() is None:
        _same(AvailabilityUpdate.from_json(update.to_json()), update)
    _decided(update)


def _table(alphabet: str) -> list[str]:
    """Byte -> character, for `Draw.text`."""
    return [alphabet[i % len(alphabet)] for i in range(256)]


_NAME = _table("abcdefghijklmnopqrstuvwxyz0123456789-._")
_PATH = _table("abcdefghijklmnopqrstuvwxyz0123456789-._/{}~%!$&'()*+,;=:@é中")
_REASON = _table("abcdefghijklmnopqrstuvwxyz0123456789-._/{}~%!$&'()*+,;=:@é中 \"\\\t<>日本")
_METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "M-SEARCH", "*")


def _endpoint(reader: Draw, service: str) -> Endpoint:
    method = _METHODS[reader.byte() % len(_METHODS)]
    if method == "*":
        return Endpoint.service_wide(service)
    return Endpoint(service, method, "/" + reader.text(_PATH, 40))


def update_valid(data: bytes) -> None:
    """A valid update built from the input, signed: both wires deliver it, and it is accepted."""
    reader = Draw(data)
    service = reader.text(_NAME, 20)
    endpoint = _endpoint(reader, service)
    available = bool(reader.byte() & 1)
    chain: tuple[Cause, ...] = ()
    if not available:
        links = {_endpoint(reader, reader.text(_NAME, 10)) for _ in range(reader.number(5))}
        links.discard(endpoint)
        chain = tuple(Cause(e, reader.text(_REASON, 60)) for e in sorted(links, key=str))
        chain += (Cause(endpoint, reader.text(_REASON, 60)),)
    expires_at = NOW + 0.001 + reader.number(10_000_000) / 1000
    version = reader.number(int((NOW + 60) * 1_000_000))
    update = sign(
        AvailabilityUpdate(service, endpoint, available, chain, expires_at, version), SECRET
    )
    assert update.problem() is None, update
    received = AvailabilityUpdate.from_json(update.to_json())
    _same(received, update)
    message = pb.AvailabilityUpdate.FromString(update_to_proto(update).SerializeToString())
    over_watch = update_from_proto(message)
    _same(over_watch, update)
    for copy in (received, over_watch):
        verdict = verify(copy, SECRET, now=NOW, receiver="@receiver", max_skew=60)
        assert verdict is Verdict.ACCEPTED, (verdict, update)
    json.loads(canonical_bytes(update))  # canonical bytes are JSON any language reads


def _framing_targets() -> dict[str, Callable[[bytes], None]]:
    from bench.fuzz.framing import request_stream, response_relay

    return {"framing_requests": request_stream, "framing_responses": response_relay}


TARGETS: dict[str, Callable[[bytes], None]] = {
    "update_json": update_json,
    "update_proto": update_proto,
    "update_valid": update_valid,
    **_framing_targets(),
}
