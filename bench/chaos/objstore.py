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

    class Server(ThreadingHTTPServer):
        def process_request(self, request, client_address) -> None:  # noqa: ANN001
            if dropping():
                # read what the client sent, then reset the connection without an answer
                request.settimeout(2)
                try:
                    request.recv(1 << 16)
                except OSError:
                    pass
                request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                request.close()
                print(f"{time.time():.3f} reset a connection from {client_address[0]}", flush=True)
                return
            super().process_request(request, client_address)

    Server(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
