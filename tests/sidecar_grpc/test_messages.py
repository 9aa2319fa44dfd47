"""The servicer's registration, in process (the `Call` codec: test_call_codec.py)."""

from __future__ import annotations

from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2 as pb


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
