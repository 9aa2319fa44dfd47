"""The Kubernetes manifests are consistent with the sidecar they run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from cascadebreaker.sidecar.config import parse_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"


def documents() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in documents() if d["kind"] == kind]


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    files = {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files


def test_sidecar_config_in_the_configmap_is_valid_and_matches_the_pod() -> None:
    (configmap,) = [c for c in by_kind("ConfigMap") if c["metadata"]["name"] == "checkout-sidecar"]
    config = parse_config(yaml.safe_load(configmap["data"]["sidecar.yaml"]))
    (deployment,) = [d for d in by_kind("Deployment") if d["metadata"]["name"] == "checkout"]
    pod = deployment["spec"]["template"]["spec"]
    sidecar = next(c for c in pod["containers"] if c["name"] == "sidecar")
    ports = {p["name"]: p["containerPort"] for p in sidecar["ports"]}
    assert config.listen.inbound is not None and config.listen.admin is not None
    assert config.listen.grpc is not None
    assert ports == {
        "inbound": config.listen.inbound.port,
        "grpc": config.listen.grpc.port,
        "admin": config.listen.admin.port,
    }
    # probes hit the admin listener's health endpoints
    assert sidecar["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
    assert sidecar["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
    # the app's proxy points at the outbound listener
    app = next(c for c in pod["containers"] if c["name"] == "app")
    proxy = next(e["value"] for e in app["env"] if e["name"] == "HTTP_PROXY")
    assert config.listen.outbound is not None
    assert proxy == f"http://{config.listen.outbound}"
    # the shared store is the Redis Service of these manifests
    (redis_service,) = [s for s in by_kind("Service") if s["metadata"]["name"] == "ccb-redis"]
    assert config.store == f"redis://ccb-redis:{redis_service['spec']['ports'][0]['port']}/0"


def test_services_target_named_container_ports() -> None:
    container_ports = {
        p["name"]
        for d in by_kind("Deployment")
        for c in d["spec"]["template"]["spec"]["containers"]
        for p in c.get("ports", [])
    }
    for service in by_kind("Service"):
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in container_ports, service["metadata"]["name"]
