"""Offline validation of manifests with kubernetes-validate (schemas bundled in the package)."""

from __future__ import annotations

from typing import Any

import kubernetes_validate

# The Kubernetes versions the manifests are claimed for: native sidecars (an init container with
# restartPolicy: Always) are on by default from 1.29.
KUBERNETES_VERSIONS = tuple(f"1.{minor}.0" for minor in range(29, 38))


def validate_strict(doc: dict[str, Any], versions: tuple[str, ...] = KUBERNETES_VERSIONS) -> None:
    """Raise kubernetes_validate.ValidationError unless every version's strict schema accepts."""
    for version in versions:
        kubernetes_validate.validate(doc, version, strict=True)
