"""Sidecar injection into Kubernetes workloads: pure functions over parsed manifests.

A workload whose pod template (or the workload itself) carries the annotation
`cascadebreaker.io/inject: enabled` gets, in its pod spec:

- `ccb-netinit`, a first init container that runs `ccb netinit` (iptables REDIRECT of the app's
  outbound TCP to the sidecar's transparent listener; the sidecar's uid exempt);
- `ccb-sidecar`, a native sidecar (an init container with `restartPolicy: Always`, Kubernetes
  >= 1.29) running `ccb sidecar` with its config from a ConfigMap and the update secret from a
  Secret, probes on /healthz and /readyz;
- the `ccb-config` volume.

Injecting twice gives the same manifest; uninjecting gives back the original one.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

INJECT = "cascadebreaker.io/inject"
STATUS = "cascadebreaker.io/status"
CONFIG = "cascadebreaker.io/config"
INTERCEPTION = "cascadebreaker.io/interception"
EXCLUDE_PORTS = "cascadebreaker.io/exclude-outbound-ports"
INJECTED_ENV = "cascadebreaker.io/injected-env"

SIDECAR = "ccb-sidecar"
NETINIT = "ccb-netinit"
VOLUME = "ccb-config"
CONFIG_PATH = "/etc/ccb"

# Kinds whose pod template sits at spec.template; CronJob nests one level deeper.
_TEMPLATE_KINDS = frozenset(
    {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "ReplicationController", "Job"}
)

Manifest = dict[str, Any]


class InjectError(ValueError):
    """A manifest cannot be injected; the message names the object and the problem."""


@dataclass(frozen=True)
class InjectOptions:
    """What the injected containers look like (flags of `ccb inject` and `ccb injector`)."""

    image: str = "cascadebreaker:0.1.0"
    image_pull_policy: str = "IfNotPresent"
    secret: str = "ccb-secret"
    proxy_uid: int = 1337
    outbound_port: int = 15001
    grpc_port: int = 15002
    transparent_port: int = 15003
    admin_port: int = 15000
    inbound_port: int = 15006
    # Measured in a pod (docs/kubernetes.md): ~62 MiB RSS, idle and after 1000 requests.
    cpu_request: str = "50m"
    memory_request: str = "80Mi"
    memory_limit: str = "192Mi"


def pod_templates(doc: Manifest) -> Iterator[tuple[Manifest, Manifest]]:
    """Yield (owner metadata, pod template) of every pod a manifest describes (Lists included)."""
    kind = doc.get("kind")
    if kind == "List" or (isinstance(kind, str) and kind.endswith("List") and "items" in doc):
        for item in doc.get("items") or []:
            if isinstance(item, dict):
                yield from pod_templates(item)
        return
    if kind == "Pod":
        yield doc.setdefault("metadata", {}), doc
    elif kind in _TEMPLATE_KINDS:
        template = (doc.get("spec") or {}).get("template")
        if isinstance(template, dict):
            yield doc.setdefault("metadata", {}), template
    elif kind == "CronJob":
        job = ((doc.get("spec") or {}).get("jobTemplate") or {}).get("spec") or {}
        template = job.get("template")
        if isinstance(template, dict):
            yield doc.setdefault("metadata", {}), template


def wants_injection(owner: Manifest, template: Manifest) -> bool:
    """True when the pod template, or else its workload, is annotated `inject: enabled`."""
    pod_value = ((template.get("metadata") or {}).get("annotations") or {}).get(INJECT)
    if pod_value is not None:
        return str(pod_value) == "enabled"
    return str((owner.get("annotations") or {}).get(INJECT)) == "enabled"


def inject(doc: Manifest, options: InjectOptions | None = None) -> Manifest:
    """A copy of `doc` with the sidecar added to every pod that asks for it."""
    options = options or InjectOptions()
    out = copy.deepcopy(doc)
    for owner, template in pod_templates(out):
        if wants_injection(owner, template):
            inject_pod(template, owner, options)
    return out


def uninject(doc: Manifest) -> Manifest:
    """A copy of `doc` with everything `inject` added taken out again."""
    out = copy.deepcopy(doc)
    for _owner, template in pod_templates(out):
        uninject_pod(template)
    return out


def inject_pod(pod: Manifest, owner: Manifest, options: InjectOptions) -> None:
    """Add (or refresh) the sidecar in one pod template, in place."""
    uninject_pod(pod)
    metadata = pod.setdefault("metadata", {})
    annotations = {**(owner.get("annotations") or {}), **(metadata.get("annotations") or {})}
    spec = pod.setdefault("spec", {})
    name = _app_name(owner, metadata)
    if not spec.get("containers"):
        raise InjectError(f"{name}: the pod has no containers")
    interception = str(annotations.get(INTERCEPTION, "iptables"))
    if interception not in ("iptables", "disabled"):
        raise InjectError(f"{name}: {INTERCEPTION} must be 'iptables' or 'disabled'")
    excluded = _exclude_ports(name, annotations.get(EXCLUDE_PORTS))
    config_map = str(annotations.get(CONFIG) or f"{name}-ccb")

    added = [_sidecar_container(options, interception == "iptables")]
    if interception == "iptables":
        added.insert(0, _netinit_container(options, excluded))
    else:
        env_added = _add_proxy_env(spec["containers"], options)
        if env_added:
            metadata.setdefault("annotations", {})[INJECTED_ENV] = json.dumps(
                env_added, sort_keys=True, separators=(",", ":")
            )
    spec["initContainers"] = added + list(spec.get("initContainers") or [])
    spec["volumes"] = [
        *(spec.get("volumes") or []),
        {"name": VOLUME, "configMap": {"name": config_map}},
    ]
    metadata.setdefault("annotations", {})[STATUS] = "injected"


def uninject_pod(pod: Manifest) -> None:
    """Remove the sidecar, the init step, the volume and the injected env from a pod template."""
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    spec = pod.get("spec") or {}
    for key in ("initContainers", "containers"):
        if key in spec:
            kept = [c for c in spec[key] or [] if c.get("name") not in (SIDECAR, NETINIT)]
            if kept or key == "containers":
                spec[key] = kept
            else:
                del spec[key]
    if "volumes" in spec:
        volumes = [v for v in spec["volumes"] or [] if v.get("name") != VOLUME]
        if volumes:
            spec["volumes"] = volumes
        else:
            del spec["volumes"]
    env_added = _injected_env(annotations.pop(INJECTED_ENV, None))
    for container in spec.get("containers") or []:
        names = env_added.get(str(container.get("name")), [])
        if names and "env" in container:
            container["env"] = [e for e in container["env"] if e.get("name") not in names]
            if not container["env"]:
                del container["env"]
    annotations.pop(STATUS, None)
    if "annotations" in metadata and not annotations:
        del metadata["annotations"]


def _app_name(owner: Manifest, metadata: Manifest) -> str:
    labels = metadata.get("labels") or {}
    return str(
        labels.get("app.kubernetes.io/name")
        or labels.get("app")
        or owner.get("name")
        or metadata.get("name")
        or "app"
    )


def _exclude_ports(name: str, raw: Any) -> list[int]:
    if raw is None or str(raw).strip() == "":
        return []
    ports = []
    for part in str(raw).split(","):
        part = part.strip()
        if not part.isdigit() or not 0 < int(part) < 65536:
            raise InjectError(f"{name}: {EXCLUDE_PORTS}: {part!r} is not a port")
        ports.append(int(part))
    return ports


def _sidecar_container(options: InjectOptions, transparent: bool) -> Manifest:
    args = ["sidecar", "--config", f"{CONFIG_PATH}/sidecar.yaml"]
    # The listeners the probes and the iptables rules rely on are pinned here, not in the config.
    args += ["--listen", f"admin=0.0.0.0:{options.admin_port}"]
    if transparent:
        args += ["--listen", f"transparent=127.0.0.1:{options.transparent_port}"]
    probe = {"httpGet": {"path": "/readyz", "port": "ccb-admin"}, "periodSeconds": 2}
    return {
        "name": SIDECAR,
        "image": options.image,
        "imagePullPolicy": options.image_pull_policy,
        "restartPolicy": "Always",
        "args": args,
        "env": [
            {
                "name": "CCB_SECRET",
                "valueFrom": {
                    "secretKeyRef": {"name": options.secret, "key": "CCB_SECRET", "optional": True}
                },
            },
        ],
        "ports": [
            {"name": "ccb-inbound", "containerPort": options.inbound_port},
            {"name": "ccb-grpc", "containerPort": options.grpc_port},
            {"name": "ccb-admin", "containerPort": options.admin_port},
        ],
        "startupProbe": {**probe, "periodSeconds": 1, "failureThreshold": 30},
        "readinessProbe": probe,
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "ccb-admin"},
            "periodSeconds": 10,
        },
        "resources": {
            "requests": {"cpu": options.cpu_request, "memory": options.memory_request},
            "limits": {"memory": options.memory_limit},
        },
        "securityContext": {
            "runAsUser": options.proxy_uid,
            "runAsGroup": options.proxy_uid,
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": VOLUME, "mountPath": CONFIG_PATH, "readOnly": True}],
    }


def _netinit_container(options: InjectOptions, excluded: list[int]) -> Manifest:
    args = [
        "netinit",
        "--proxy-port",
        str(options.transparent_port),
        "--proxy-uid",
        str(options.proxy_uid),
    ]
    if excluded:
        args += ["--exclude-ports", ",".join(str(p) for p in excluded)]
    return {
        "name": NETINIT,
        "image": options.image,
        "imagePullPolicy": options.image_pull_policy,
        "args": args,
        "resources": {
            "requests": {"cpu": "10m", "memory": "16Mi"},
            "limits": {"memory": "64Mi"},
        },
        "securityContext": {
            # iptables needs root with NET_ADMIN/NET_RAW in the pod's network namespace only.
            "runAsUser": 0,
            "runAsNonRoot": False,
            "allowPrivilegeEscalation": False,
            "capabilities": {"add": ["NET_ADMIN", "NET_RAW"], "drop": ["ALL"]},
        },
    }


def _add_proxy_env(containers: list[Manifest], options: InjectOptions) -> dict[str, list[str]]:
    """Without interception the app is told to use the outbound listener as its HTTP proxy.

    Returns, per container, the variables added (variables the app sets itself are kept).
    """
    # Both spellings: curl and most tools read only the lower-case `http_proxy`, others only
    # the upper-case one. An app that sets either spelling keeps its own choice for both.
    wanted = (
        (("http_proxy", "HTTP_PROXY"), f"http://127.0.0.1:{options.outbound_port}"),
        (("no_proxy", "NO_PROXY"), "127.0.0.1,localhost"),
    )
    added: dict[str, list[str]] = {}
    for container in containers:
        env = container.setdefault("env", [])
        present = {e.get("name") for e in env}
        for names, value in wanted:
            if present.isdisjoint(names):
                for name in names:
                    env.append({"name": name, "value": value})
                    added.setdefault(str(container.get("name")), []).append(name)
    return added


def _injected_env(raw: Any) -> dict[str, list[str]]:
    """The annotation written by `_add_proxy_env` (an unreadable one removes nothing)."""
    if raw is None:
        return {}
    try:
        value = json.loads(str(raw))
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {str(k): [str(n) for n in v] for k, v in value.items() if isinstance(v, list)}
