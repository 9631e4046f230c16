"""A local object store for the benchmark: PUT/GET of files under --dir over HTTP. While the
time in the --control file (a Unix time) is in the future, every connection is accepted and
reset without an answer (SO_LINGER 0), as an overloaded S3 front end or a flapping load balancer
does during a checkpoint upload."""

from __future__ import annotations

import argparse
import socket
import struct
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--control", type=Path, required=True)
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)

    def dropping() -> bool:
        try:
            return time.time() < float(args.control.read_text().strip() or 0)
        except (OSError, ValueError):
            return False

    class Handler(BaseHTTPRequestHandler):
        def setup(self) -> None:
            super().setup()
            if dropping():
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
                print(f"{time.time():.3f} dropped a connection", flush=True)

        def handle(self) -> None:
            if self.connection.fileno() == -1:
                return
            super().handle()

        def do_PUT(self) -> None:  # noqa: N802
            n = int(self.headers.get("Content-Length", 0))
            body = self.rfile.read(n)
            path = args.dir / self.path.lstrip("/").replace("..", "_")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(body)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:  # noqa: N802
            path = args.dir / self.path.lstrip("/").replace("..", "_")
            data = path.read_bytes() if path.is_file() else b""
            self.send_response(200 if path.is_file() else 404)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a) -> None:  # noqa: ANN002
            pass

    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
