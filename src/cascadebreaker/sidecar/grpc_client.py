"""Compatibility: the gRPC client moved to `cascadebreaker.sidecar.grpc.client`."""

from cascadebreaker.sidecar.grpc.client import CallRefused, SidecarClient, watch_updates

__all__ = ["CallRefused", "SidecarClient", "watch_updates"]
