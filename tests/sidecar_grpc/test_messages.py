"""The hand-made `CallResponse` encoding and the Call request's validation, in process."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cascadebreaker.sidecar.grpc.messages import encode_call_response, validate_call
from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2 as pb


def _upb(status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> bytes:
    """What the sidecar answered before: a message per header, decoded as latin-1."""
    return pb.CallResponse(
        status=status,
        headers=[
            pb.Header(name=n.decode("latin-1").lower(), value=v.decode("latin-1"))
            for n, v in headers
        ],
        body=body,
    ).SerializeToString()


_NAME = st.binary(min_size=0, max_size=300)
_HEADERS = st.lists(st.tuples(_NAME, st.binary(max_size=300)), max_size=6)


@given(st.integers(0, 2**32 - 1), _HEADERS, st.binary(max_size=70000))
def test_encoding_matches_upb_byte_for_byte(
    status: int, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    assert encode_call_response(status, headers, body) == _upb(status, headers, body)


def test_encoding_of_a_typical_response() -> None:
    headers = [(b"Content-Type", b"text/plain"), (b"X-Caf\xe9", b"cr\xe8me"), (b"Empty", b"")]
    encoded = encode_call_response(200, headers, b"hello")
    message = pb.CallResponse.FromString(encoded)
    assert message.status == 200
    assert [(h.name, h.value) for h in message.headers] == [
        ("content-type", "text/plain"),
        ("x-caf\xe9", "cr\xe8me"),
        ("empty", ""),
    ]
    assert message.body == b"hello"


def test_validation_gives_the_wire_form() -> None:
    request = pb.CallRequest(
        upstream="payment",
        method="post",
        path="/v1/charges",
        headers=[pb.Header(name="X-Trace", value="caf\xe9")],
    )
    assert validate_call(request) == (b"POST", [(b"X-Trace", b"caf\xe9")])
    assert validate_call(pb.CallRequest(upstream="payment", path="/"))[0] == b"GET"
    assert validate_call(pb.CallRequest(upstream="payment", method="M-SEARCH", path="/"))[0] == (
        b"M-SEARCH"
    )


def test_the_servicer_registers_every_method_of_the_service() -> None:
    """`add_servicer` replaces the generated registration: it must not miss a method."""
    from cascadebreaker.sidecar.grpc.api import add_servicer

    class Server:
        def add_generic_rpc_handlers(self, handlers: object) -> None:
            pass

        def add_registered_method_handlers(self, service: str, handlers: dict[str, object]) -> None:
            self.registered = (service, set(handlers))

    class Service:
        Call = Check = Watch = None

    server = Server()
    add_servicer(Service(), server)  # type: ignore[arg-type]
    described = pb.DESCRIPTOR.services_by_name["Sidecar"]
    assert server.registered == (described.full_name, {m.name for m in described.methods})
