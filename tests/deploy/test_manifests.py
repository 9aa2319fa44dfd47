"""The Kustomize tree renders, passes strict schema validation and agrees with the sidecar."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from cascadebreaker.kube.inject import SIDECAR, InjectOptions, inject, pod_templates
from cascadebreaker.sidecar.command import override_listeners
from cascadebreaker.sidecar.schema import ConfigError, parse_config
from tests.deploy import shop_manifests
from tests.deploy.render import KUBE, OVERLAYS, ROOT, kustomize
from tests.kube.k8s_schema import KUBERNETES_VERSIONS, validate_strict


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {name: kustomize(name) for name in OVERLAYS}


def test_every_rendered_object_is_valid_for_every_claimed_version(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    for name, docs in rendered.items():
        assert docs, name
        for doc in docs:
            validate_strict(doc)
            validate_strict(inject(doc))  # and as it is applied after `ccb inject`


def test_overlays_share_the_base(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for overlay in ("overlays/checkout", "overlays/shop"):
        names = {(d["kind"], d["metadata"]["name"]) for d in rendered[overlay]}
        assert {
            ("Deployment", "ccb-redis"),
            ("Service", "ccb-redis"),
            ("Secret", "ccb-secret"),
        } <= names


def test_checkout_is_written_as_inject_writes_it(rendered: dict[str, list[dict[str, Any]]]) -> None:
    text = (KUBE / "overlays/checkout/checkout.yaml").read_text()
    docs = [d for d in yaml.safe_load_all(text) if d]
    assert [inject(d) for d in docs] == docs  # a fixed point: nothing hand-edited out of shape
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    ((_, template),) = list(pod_templates(deployment))
    sidecar = next(c for c in template["spec"]["initContainers"] if c["name"] == SIDECAR)
    assert sidecar["restartPolicy"] == "Always"


def _sidecar_configs(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        d["metadata"]["name"]: yaml.safe_load(d["data"]["sidecar.yaml"])
        for d in docs
        if d["kind"] == "ConfigMap" and "sidecar.yaml" in d.get("data", {})
    }


@pytest.mark.parametrize("overlay", ["overlays/checkout", "overlays/shop"])
def test_sidecar_configs_are_valid_and_match_the_pods(
    rendered: dict[str, list[dict[str, Any]]], overlay: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = [inject(d) for d in rendered[overlay]]
    configs = _sidecar_configs(docs)
    (secret,) = [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == "ccb-secret"]
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    injected = 0
    for doc in docs:
        for _owner, template in pod_templates(doc):
            spec = template["spec"]
            sidecars = [c for c in spec.get("initContainers", []) if c["name"] == SIDECAR]
            if not sidecars:
                continue
            injected += 1
            (sidecar,) = sidecars
            volume = next(v for v in spec["volumes"] if v["name"] == "ccb-config")
            raw = configs[volume["configMap"]["name"]]
            # what the container will run: the file plus the listeners its args pin, and the
            # overlay's secret as CCB_SECRET (it listens beyond loopback: no secret, no start)
            pinned = [a for a in sidecar["args"] if re.match(r"^\w+=", a)]
            (env,) = [e for e in sidecar["env"] if e["name"] == "CCB_SECRET"]
            assert env["valueFrom"]["secretKeyRef"]["name"] == "ccb-secret"
            monkeypatch.delenv("CCB_SECRET", raising=False)
            with pytest.raises(ConfigError, match=r"^allow_insecure: listen\."):
                override_listeners(parse_config(raw), pinned)
            monkeypatch.setenv("CCB_SECRET", secret["stringData"]["CCB_SECRET"])
            config = override_listeners(parse_config(raw), pinned)
            ports = {p["name"]: p["containerPort"] for p in sidecar["ports"]}
            assert config.listen.admin is not None and config.listen.inbound is not None
            assert ports["ccb-admin"] == config.listen.admin.port
            assert config.listen.admin.host == "0.0.0.0"  # the kubelet probes the pod's address
            assert ports["ccb-inbound"] == config.listen.inbound.port
            # every upstream is a Service of this overlay, on a port it exposes
            for upstream in config.upstreams.values():
                host, port = upstream.url.removeprefix("http://").split(":")
                if host in services:
                    assert int(port) in {p["port"] for p in services[host]["spec"]["ports"]}
    assert injected > 0


def test_services_target_ports_the_pods_listen_on(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    for overlay in ("overlays/checkout", "overlays/shop"):
        docs = [inject(d) for d in rendered[overlay]]
        pods = {}
        for doc in docs:
            for _owner, template in pod_templates(doc):
                labels = template["metadata"]["labels"]
                containers = template["spec"]["containers"] + template["spec"].get(
                    "initContainers", []
                )
                pods[labels["app.kubernetes.io/name"]] = {
                    p["containerPort"] for c in containers for p in c.get("ports", [])
                }
        for service in (d for d in docs if d["kind"] == "Service"):
            target = pods[service["spec"]["selector"]["app.kubernetes.io/name"]]
            for port in service["spec"]["ports"]:
                assert port["targetPort"] in target or isinstance(port["targetPort"], str)


def test_shop_overlay_is_generated_from_the_demo_topology() -> None:
    committed = (KUBE / "overlays/shop/shop.yaml").read_text()
    assert committed == shop_manifests.render(), (
        "regenerate: python -m tests.deploy.shop_manifests"
        " > deploy/kubernetes/overlays/shop/shop.yaml"
    )


def test_webhook_configuration_points_at_the_injector(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered["injector"]
    (webhook_config,) = [d for d in docs if d["kind"] == "MutatingWebhookConfiguration"]
    (webhook,) = webhook_config["webhooks"]
    assert webhook["admissionReviewVersions"] == ["v1"]
    assert webhook["rules"][0]["resources"] == ["pods"]
    service_ref = webhook["clientConfig"]["service"]
    (service,) = [d for d in docs if d["kind"] == "Service"]
    assert service_ref["name"] == service["metadata"]["name"]
    assert service_ref["namespace"] == service["metadata"]["namespace"]
    assert service_ref["path"] == "/mutate"
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"][0] == "injector"
    assert "--listen=0.0.0.0:8443" in container["args"]


def test_dockerfile_matches_what_the_manifests_assume() -> None:
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "ARG BASE_IMAGE=python:3.11-slim" in dockerfile
    assert dockerfile.count("FROM ${BASE_IMAGE}") == 2  # multi-stage on the same base
    uid = InjectOptions().proxy_uid
    assert f"USER {uid}:{uid}" in dockerfile  # netinit exempts exactly the sidecar's uid
    assert 'ENTRYPOINT ["ccb"]' in dockerfile


def test_claimed_versions_start_with_native_sidecars() -> None:
    assert KUBERNETES_VERSIONS[0] == "1.29.0"
