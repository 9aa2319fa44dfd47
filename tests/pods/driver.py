"""A client inside a pod: reads JSON requests on stdin, answers JSON lines on stdout.

    {"method": "POST", "url": "http://10.x.y.z:8080/orders", "json": {...}}
 -> {"status": 201, "body": {...}}   or   {"status": 0, "error": "timeout"}

The tests drive it from the root namespace through the pipe, so no test code ever opens a
socket to a pod address from there.
"""

from __future__ import annotations

import http.client
import json
import sys
from urllib.parse import urlsplit


def call(request: dict[str, object]) -> dict[str, object]:
    url = urlsplit(str(request["url"]))
    body = json.dumps(request["json"]).encode() if request.get("json") is not None else None
    headers = {"content-type": "application/json"} if body is not None else {}
    conn = http.client.HTTPConnection(
        url.hostname or "",
        url.port or 80,
        timeout=float(request.get("timeout", 30)),  # type: ignore[arg-type]
    )
    try:
        conn.request(str(request.get("method", "GET")), url.path or "/", body=body, headers=headers)
        response = conn.getresponse()
        raw = response.read()
        try:
            parsed: object = json.loads(raw)
        except ValueError:
            parsed = raw.decode("latin-1")
        return {"status": response.status, "body": parsed}
    except (OSError, http.client.HTTPException) as exc:
        return {"status": 0, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        conn.close()


def main() -> None:
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(call(json.loads(line))), flush=True)


if __name__ == "__main__":
    main()
