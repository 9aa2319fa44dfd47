"""Generated from proto/ccb/v1/sidecar.proto by scripts/gen-proto; do not edit."""
