"""Compatibility: the gRPC client moved to `cascadebreaker.sidecar.grpc.client`."""

from cascadebreaker.sidecar.grpc.client import CallRefused, ClientTls, SidecarClient, watch_updates

__all__ = ["CallRefused", "ClientTls", "SidecarClient", "watch_updates"]
