"""`ccb inject`: the sidecar added to annotated workloads, idempotently, and taken out again."""

from __future__ import annotations

import copy
import subprocess
import sys
from typing import Any

import kubernetes_validate
import pytest
import yaml

from cascadebreaker.kube.inject import (
    INJECT,
    NETINIT,
    SIDECAR,
    STATUS,
    InjectError,
    InjectOptions,
    inject,
    pod_templates,
    uninject,
)
from tests.kube.k8s_schema import validate_strict


def deployment(annotations: dict[str, str] | None = None, **pod: Any) -> dict[str, Any]:
    template: dict[str, Any] = {
        "metadata": {"labels": {"app.kubernetes.io/name": "payment"}},
        "spec": {"containers": [{"name": "app", "image": "payment:1"}], **pod},
    }
    if annotations is not None:
        template["metadata"]["annotations"] = annotations
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "payment"},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": "payment"}},
            "template": template,
        },
    }


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    ((_owner, template),) = list(pod_templates(doc))
    return template["spec"]  # type: ignore[no-any-return]


def test_annotated_workload_gets_native_sidecar_and_netinit() -> None:
    out = inject(deployment({INJECT: "enabled"}))
    spec = pod_spec(out)
    netinit, sidecar = spec["initContainers"]
    assert netinit["name"] == NETINIT
    assert netinit["args"][:5] == ["netinit", "--proxy-port", "15003", "--proxy-uid", "1337"]
    assert "NET_ADMIN" in netinit["securityContext"]["capabilities"]["add"]
    assert sidecar["name"] == SIDECAR
    assert sidecar["restartPolicy"] == "Always"  # a native sidecar
    assert sidecar["securityContext"]["runAsUser"] == 1337
    assert "transparent=127.0.0.1:15003" in sidecar["args"]
    assert sidecar["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert sidecar["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert {"name": "ccb-config", "configMap": {"name": "payment-ccb"}} in spec["volumes"]
    assert spec["containers"] == [{"name": "app", "image": "payment:1"}]  # the app is untouched
    assert out["spec"]["template"]["metadata"]["annotations"][STATUS] == "injected"
    validate_strict(out)


def test_unannotated_and_disabled_workloads_are_left_alone() -> None:
    for doc in (deployment(), deployment({INJECT: "disabled"})):
        assert inject(doc) == doc
    # the pod template's annotation wins over the workload's
    doc = deployment({INJECT: "disabled"})
    doc["metadata"]["annotations"] = {INJECT: "enabled"}
    assert inject(doc) == doc


def test_workload_level_annotation_also_asks() -> None:
    doc = deployment()
    doc["metadata"]["annotations"] = {INJECT: "enabled"}
    assert SIDECAR in [c["name"] for c in pod_spec(inject(doc))["initContainers"]]


def test_injection_is_idempotent_and_uninject_restores_the_original() -> None:
    original = deployment(
        {INJECT: "enabled"},
        initContainers=[{"name": "migrate", "image": "payment:1"}],
        volumes=[{"name": "data", "emptyDir": {}}],
    )
    once = inject(original)
    assert inject(once) == once
    assert [c["name"] for c in pod_spec(once)["initContainers"]] == [NETINIT, SIDECAR, "migrate"]
    assert uninject(once) == original
    assert uninject(original) == original


def test_interception_disabled_sets_the_proxy_env_and_uninject_removes_only_that() -> None:
    original = deployment({INJECT: "enabled", "cascadebreaker.io/interception": "disabled"})
    spec = pod_spec(original)
    spec["containers"].append(
        {"name": "worker", "image": "w:1", "env": [{"name": "HTTP_PROXY", "value": "mine"}]}
    )
    out = inject(original)
    app, worker = pod_spec(out)["containers"]
    assert {"name": "HTTP_PROXY", "value": "http://127.0.0.1:15001"} in app["env"]
    assert {"name": "http_proxy", "value": "http://127.0.0.1:15001"} in app["env"]  # curl's
    assert {"name": "HTTP_PROXY", "value": "mine"} in worker["env"]  # the app's own value kept
    assert "http_proxy" not in {e["name"] for e in worker["env"]}  # ... for both spellings
    assert NETINIT not in [c["name"] for c in pod_spec(out)["initContainers"]]
    assert inject(out) == out
    assert uninject(out) == original
    validate_strict(out)


def test_every_pod_bearing_kind_and_lists() -> None:
    base = deployment({INJECT: "enabled"})
    template = base["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", **template["metadata"]}}
    pod["spec"] = copy.deepcopy(template["spec"])
    cron = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly"},
        "spec": {
            "schedule": "0 3 * * *",
            "jobTemplate": {"spec": {"template": copy.deepcopy(template)}},
        },
    }
    cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    sts = copy.deepcopy(base) | {"kind": "StatefulSet"}
    sts["spec"]["serviceName"] = "payment"
    items = {"apiVersion": "v1", "kind": "List", "items": [pod, cron, sts]}
    out = inject(items)
    for doc in out["items"]:
        ((_owner, tpl),) = list(pod_templates(doc))
        assert [c["name"] for c in tpl["spec"]["initContainers"]] == [NETINIT, SIDECAR]
        validate_strict(doc)


def test_bad_annotations_name_the_problem() -> None:
    with pytest.raises(InjectError, match="exclude-outbound-ports"):
        inject(deployment({INJECT: "enabled", "cascadebreaker.io/exclude-outbound-ports": "x"}))
    with pytest.raises(InjectError, match="interception"):
        inject(deployment({INJECT: "enabled", "cascadebreaker.io/interception": "ebpf"}))
    with pytest.raises(InjectError, match="no containers"):
        inject(deployment({INJECT: "enabled"}, containers=[]))


def test_options_change_the_image_and_excluded_ports() -> None:
    doc = deployment({INJECT: "enabled", "cascadebreaker.io/exclude-outbound-ports": "6379,5432"})
    out = inject(doc, InjectOptions(image="reg.local/ccb:2", image_pull_policy="Never"))
    netinit, sidecar = pod_spec(out)["initContainers"]
    assert netinit["args"][-2:] == ["--exclude-ports", "6379,5432"]
    assert sidecar["image"] == "reg.local/ccb:2" and sidecar["imagePullPolicy"] == "Never"


def test_schema_check_is_not_a_rubber_stamp() -> None:
    out = inject(deployment({INJECT: "enabled"}))
    pod_spec(out)["initContainers"][1]["restartPolicy2"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_strict(out)


def ccb(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cascadebreaker.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_cli_reads_stdin_and_files_and_round_trips(tmp_path: Any) -> None:
    docs = [
        deployment({INJECT: "enabled"}),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "s"},
            "spec": {"ports": [{"port": 80}]},
        },
    ]
    text = yaml.safe_dump_all(docs, sort_keys=False)
    injected = ccb("inject", stdin=text)
    assert injected.returncode == 0, injected.stderr
    out = list(yaml.safe_load_all(injected.stdout))
    assert out == [inject(d) for d in docs]
    path = tmp_path / "injected.yaml"
    path.write_text(injected.stdout)
    again = ccb("inject", str(path))
    assert again.stdout == injected.stdout  # idempotent through the CLI
    back = ccb("inject", "--uninject", str(path))
    assert list(yaml.safe_load_all(back.stdout)) == docs


def test_cli_bad_input_is_a_clear_error(tmp_path: Any) -> None:
    result = ccb("inject", stdin="kind: [unclosed")
    assert result.returncode == 2 and "not valid YAML" in result.stderr
    result = ccb("inject", stdin="- a\n- b\n")
    assert result.returncode == 2 and "not a mapping" in result.stderr
    result = ccb("inject", str(tmp_path / "missing.yaml"))
    assert result.returncode == 2 and "cannot read" in result.stderr
    bad = yaml.safe_dump(deployment({INJECT: "enabled", "cascadebreaker.io/interception": "x"}))
    result = ccb("inject", stdin=bad)
    assert result.returncode == 2 and "payment: cascadebreaker.io/interception" in result.stderr
