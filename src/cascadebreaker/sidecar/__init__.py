"""sidecar."""
