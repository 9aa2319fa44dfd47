"""Kubernetes: sidecar injection (`ccb inject`, `ccb injector`) and interception (`ccb netinit`)."""
