"""FakeKubeAPI: a small real HTTP server on 127.0.0.1 that speaks the few Kubernetes API
endpoints the adapter uses (nodes list/read/patch, pods list/delete-collection, custom objects
get/patch). It is a fake because no Kubernetes cluster can run here; it keeps the objects in
memory and records every request so tests can check what the adapter sent."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


def merge(target: dict, patch: dict) -> dict:
    """JSON merge patch (RFC 7386): null deletes, dicts merge, everything else replaces."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = value
    return target


def node(name: str, ready: bool = True) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": {}},
            "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def pod(name: str, node_name: str, labels: dict, phase: str = "Running") -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": {"nodeName": node_name, "containers": [{"name": "trainer", "image": "x"}]},
            "status": {"phase": phase, "containerStatuses": [
                {"name": "trainer", "restartCount": 0, "ready": True, "image": "x", "imageID": "x"}]}}


class FakeKubeAPI:
    def __init__(self, port: int) -> None:
        self.nodes: dict[str, dict] = {}
        self.pods: list[dict] = []
        self.custom: dict[str, dict] = {}
        self.requests: list[tuple[str, str, dict | None]] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> dict | None:
                n = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(n)) if n else None

            def _route(self, method: str) -> None:
                url = urlparse(self.path)
                body = self._body() if method in ("PATCH", "POST", "DELETE") else None
                api.requests.append((method, url.path, body, self.headers.get("Content-Type")))
                q = parse_qs(url.query)
                code, out = api.handle(method, url.path, q, body)
                self._send(code, out)

            def do_GET(self) -> None:
                self._route("GET")

            def do_PATCH(self) -> None:
                self._route("PATCH")

            def do_DELETE(self) -> None:
                self._route("DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> FakeKubeAPI:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _select(self, q: dict) -> list[dict]:
        selector = (q.get("labelSelector") or [""])[0]
        want = dict(kv.split("=", 1) for kv in selector.split(",") if "=" in kv)
        return [p for p in self.pods if all(p["metadata"]["labels"].get(k) == v for k, v in want.items())]

    def handle(self, method: str, path: str, q: dict, body: dict | None) -> tuple[int, dict]:
        not_found = (404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404})
        if path == "/api/v1/nodes" and method == "GET":
            return 200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": list(self.nodes.values())}
        if m := re.fullmatch(r"/api/v1/nodes/([^/]+)", path):
            obj = self.nodes.get(m.group(1))
            if obj is None:
                return not_found
            if method == "PATCH":
                merge(obj, body or {})
            return 200, obj
        if m := re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods", path):
            items = self._select(q)
            if method == "DELETE":
                self.pods = [p for p in self.pods if p not in items]
            return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
        if m := re.fullmatch(r"/apis/([^/]+)/([^/]+)/namespaces/([^/]+)/([^/]+)/([^/]+)", path):
            key = f"{m.group(4)}/{m.group(5)}"
            obj = self.custom.get(key)
            if obj is None:
                return not_found
            if method == "PATCH":
                merge(obj, body or {})
            return 200, obj
        return not_found
