"""uvicorn's HTTP/1.1 protocol with protocol-level errors (malformed request line, headers over
h11's size limit) answered in the one JSON error shape rather than uvicorn's plain text. These
requests never reach the app, so no exception handler can shape them."""

from __future__ import annotations

import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from app.api.errors import error_body


def protocol_error_body(msg: str) -> bytes:
    message = "malformed HTTP request (bad request line or headers, or headers too large)"
    return json.dumps(error_body("bad_request", message, {"reason": msg})).encode()


class JsonErrorH11Protocol(H11Protocol):
    def send_400_response(self, msg: str) -> None:
        body = protocol_error_body(msg)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (b"connection", b"close")]
        self.transport.write(self.conn.send(h11.Response(status_code=400, headers=headers, reason=b"Bad Request")))
        self.transport.write(self.conn.send(h11.Data(data=body)))
        self.transport.write(self.conn.send(h11.EndOfMessage()))
        self.transport.close()
