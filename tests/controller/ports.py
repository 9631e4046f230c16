"""Free TCP ports for test servers, from LOGDX_TEST_PORT_BASE (default 18300) upwards."""

import os
import socket


def free_port(offset: int = 0) -> int:
    base = int(os.environ.get("LOGDX_TEST_PORT_BASE", "18300"))
    for port in range(base + offset, base + 100):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {base}..{base + 99}")
