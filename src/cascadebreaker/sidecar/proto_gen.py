"""Compatibility: the generated code moved to `cascadebreaker.sidecar.grpc.proto_gen`."""

from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2, sidecar_pb2_grpc

__all__ = ["sidecar_pb2", "sidecar_pb2_grpc"]
