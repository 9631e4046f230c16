"""What the README tells a newcomer to run works: its make targets have recipes, the files it
names ship, and its scheduler flow runs as written against a live server."""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def test_every_make_target_the_readme_names_has_a_recipe():
    targets = sorted(set(re.findall(r"`?make ([a-z][\w-]*)", README)))
    assert {"demo", "test", "bench"} <= set(targets)
    for target in targets:
        out = subprocess.run(["make", "-n", target], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "Nothing to be done" not in out.stdout + out.stderr, target
    assert "bench/bench_compress.py" in subprocess.run(["make", "-n", "bench"], cwd=REPO, capture_output=True,
                                                       text=True, timeout=60).stdout


def test_the_files_the_readme_names_ship():
    for name in set(re.findall(r"examples/[\w./-]+\w", README)):
        assert (REPO / name).is_file(), name
    plain = (REPO / "examples" / "sample_job.log").read_bytes()
    assert gzip.decompress((REPO / "examples" / "sample_job.log.gz").read_bytes()) == plain
    assert zstandard.ZstdDecompressor().decompress((REPO / "examples" / "sample_job.log.zst").read_bytes()) == plain


def test_the_readme_says_where_make_demo_put_logdx():
    quick = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert ".venv/bin/logdx" in quick and "source .venv/bin/activate" in quick
    assert "T=$(.venv/bin/logdx token create --role scheduler)" in README


def _scheduler_flow() -> str:
    after = README.split("<!-- scheduler-flow", 1)[1]
    return after.split("```sh\n", 1)[1].split("```", 1)[0]


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_the_readme_scheduler_flow_runs_as_written(tmp_path):
    from app.auth.models import TokenRole  # noqa: F401 - the service extra is installed
    from tests.service.live import LiveServer

    # a checkout as `make demo` leaves it: .venv/bin/logdx and the examples
    checkout = tmp_path / "checkout"
    (checkout / ".venv" / "bin").mkdir(parents=True)
    logdx = checkout / ".venv" / "bin" / "logdx"
    logdx.write_text(f"#!/bin/sh\nexec {sys.executable} -m app.cli \"$@\"\n")
    logdx.chmod(0o755)
    (checkout / "examples").symlink_to(REPO / "examples")
    data = tmp_path / "data"
    server = LiveServer({"LOGDX_DATA_DIR": str(data), "LOGDX_DIAGNOSIS_EXECUTOR": "thread"}).start(timeout=60)
    try:
        script = _scheduler_flow().replace("http://127.0.0.1:8000", server.url)
        env = {**os.environ, "LOGDX_DATA_DIR": str(data), "PYTHONPATH": str(REPO)}
        out = subprocess.run(["bash", "-c", "set -euo pipefail\n" + script], cwd=checkout, env=env,
                             capture_output=True, text=True, timeout=180)
    finally:
        server.kill()
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert out.stdout.count('"error_type":"ECCError"') >= 3, out.stdout[-3000:]  # PUT flow, list, one-shot
    assert '"suspect_hosts":["node-01"]' in out.stdout
