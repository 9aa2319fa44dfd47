"""`ccb injector`: the injection served as a mutating admission webhook (AdmissionReview v1).

The API server POSTs an AdmissionReview for every Pod being created; the answer allows it and,
for pods annotated `cascadebreaker.io/inject: enabled`, carries a base64 JSONPatch that adds the
sidecar (the same `inject_pod` as `ccb inject`). Low volume, so the standard library's threaded
HTTPS server is enough. A malformed review gets a 400 and the server lives on.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cascadebreaker.kube.inject import InjectError, InjectOptions, inject_pod, wants_injection

log = logging.getLogger("cascadebreaker.kube.injector")

MAX_BODY = 4 * 1024 * 1024  # the API server's own request limit is 3 MiB
# The parts of a pod that injection may change; each is patched whole.
_PATCHED = (
    ("metadata", "annotations"),
    ("spec", "initContainers"),
    ("spec", "containers"),
    ("spec", "volumes"),
)


class ReviewError(ValueError):
    """The body is not an AdmissionReview v1 request."""


def json_patch(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """RFC 6902 operations turning `before` into `after` on the parts injection touches."""
    ops: list[dict[str, Any]] = []
    for parent, key in _PATCHED:
        old_parent = before.get(parent)
        new_parent = after.get(parent) or {}
        old, new = (old_parent or {}).get(key), new_parent.get(key)
        if old == new:
            continue
        if old_parent is None:
            # `add` of a member needs its parent object; create it with the value inside.
            ops.append({"op": "add", "path": f"/{parent}", "value": {key: new}})
            before = {**before, parent: {key: new}}
        elif new is None:
            ops.append({"op": "remove", "path": f"/{parent}/{key}"})
        else:
            ops.append({"op": "add", "path": f"/{parent}/{key}", "value": new})
    return ops


def review(body: Any, options: InjectOptions) -> dict[str, Any]:
    """The AdmissionReview response to one AdmissionReview request."""
    if not isinstance(body, dict) or body.get("kind") != "AdmissionReview":
        raise ReviewError("the body must be an AdmissionReview")
    if body.get("apiVersion") != "admission.k8s.io/v1":
        raise ReviewError("only admission.k8s.io/v1 AdmissionReview is served")
    request = body.get("request")
    if not isinstance(request, dict) or not isinstance(request.get("uid"), str):
        raise ReviewError("request.uid is required")
    response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
    pod = request.get("object")
    kind = (request.get("kind") or {}).get("kind")
    if kind == "Pod" and isinstance(pod, dict) and request.get("operation", "CREATE") == "CREATE":
        metadata = pod.get("metadata") or {}
        if wants_injection(metadata, pod):
            after = copy.deepcopy(pod)
            try:
                inject_pod(after, metadata, options)
            except InjectError as exc:
                # Refusing the pod would block the workload; admit it as it is and say why.
                response["warnings"] = [f"cascadebreaker: not injected: {exc}"]
            else:
                patch = json_patch(pod, after)
                response["patchType"] = "JSONPatch"
                response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


class _Handler(BaseHTTPRequestHandler):
    server: InjectorServer
    protocol_version = "HTTP/1.1"
    timeout = 10  # seconds a client may stall (handshake included) before its thread gives up

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path in ("/healthz", "/readyz"):
            self._reply(200, {"status": "ok"})
        else:
            self._reply(404, {"error": "not found"})

    def do_POST(self) -> None:
        if self.path.split("?", 1)[0] != "/mutate":
            self._reply(404, {"error": "not found"})
            return
        try:
            length = int(self.headers.get("content-length", ""))
        except ValueError:
            self._reply(411, {"error": "content-length required"})
            return
        if not 0 <= length <= MAX_BODY:
            self.close_connection = True
            self._reply(413, {"error": "body too large"})
            return
        raw = self.rfile.read(length)
        try:
            answer = review(json.loads(raw), self.server.options)
        except (ValueError, ReviewError) as exc:
            self._reply(400, {"error": str(exc)})
            return
        self._reply(200, answer)


class InjectorServer(ThreadingHTTPServer):
    """HTTPS server answering AdmissionReviews on POST /mutate."""

    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], cert: str, key: str, options: InjectOptions
    ) -> None:
        super().__init__(address, _Handler)
        self.options = options
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(cert, key)
        # The handshake happens on the handler's thread (first read), not in the accept loop.
        self.socket = context.wrap_socket(
            self.socket, server_side=True, do_handshake_on_connect=False
        )

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A failed handshake or a dropped client is the client's problem: log, no traceback."""
        log.info("injector: connection from %s failed", client_address, exc_info=True)

    @property
    def port(self) -> int:
        """The bound port (resolves port 0)."""
        return int(self.server_address[1])

    def start_background(self) -> threading.Thread:
        """Serve on a daemon thread (tests, embedding)."""
        thread = threading.Thread(target=self.serve_forever, name="ccb-injector", daemon=True)
        thread.start()
        return thread
