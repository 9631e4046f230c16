"""Streams a running Slurm job's log to logdx in chunks (what a site's log shipper does), so the
server's live watch sees it grow: started in the background by bench/chaos/job.sh.

    ship.py --log FILE --attempt N     (LOGDX_URL, LOGDX_TOKEN, SLURM_* from the job's environment)

The attempt's log is the bytes the file gains from the moment this starts (Slurm appends a
requeued job's output to the same file). SIGTERM: send what is left, then stop without sealing
(the epilog uploads the attempt's whole log when the job ends).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


def call(method: str, url: str, token: str, body: bytes, ctype: str) -> dict:
    req = urllib.request.Request(url, data=body, method=method,
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": ctype})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read() or b"{}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--log", type=Path, required=True)
    ap.add_argument("--attempt", type=int, required=True)
    ap.add_argument("--start", type=int, default=None, help="byte offset where this attempt's output begins")
    ap.add_argument("--interval", type=float, default=1.0)
    args = ap.parse_args()
    url, token = os.environ["LOGDX_URL"].rstrip("/"), os.environ["LOGDX_TOKEN"]
    hosts = subprocess.run(["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]],
                           capture_output=True, text=True).stdout.split()
    job = call("POST", f"{url}/v1/jobs", token, json.dumps({
        "cluster": os.environ.get("SLURM_CLUSTER_NAME", "default"), "external_id": os.environ["SLURM_JOB_ID"],
        "scheduler": "slurm", "hosts": hosts, "state": "running", "attempt": args.attempt,
        "user": os.environ.get("USER") or None}).encode(), "application/json")
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    start = args.start if args.start is not None else (args.log.stat().st_size if args.log.exists() else 0)
    sent = 0
    while True:
        last = bool(stop)
        try:
            with args.log.open("rb") as f:
                f.seek(start + sent)
                data = f.read(4 << 20)
        except FileNotFoundError:
            data = b""
        if data:
            try:
                call("POST", f"{url}/v1/jobs/{job['id']}/log/chunks?offset={sent}&attempt={args.attempt}",
                     token, data, "application/octet-stream")
                sent += len(data)
            except (urllib.error.URLError, OSError) as exc:
                print(f"ship: chunk at {sent} not sent: {exc}", file=sys.stderr)
        if last:
            return 0
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
