"""Archives for the re-labeling tests: the realworld corpus copies (with their human labels as
`label.json` sidecars), generated multi-rank logs (plain, gz, zst) and broken files; and a rule
change to re-label with."""

from __future__ import annotations

import gzip
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
REALWORLD = REPO / "tests" / "golden" / "realworld"
SHIPPED_RULES = REPO / "rules"
REMOVED_RULE = "cuda-ecc-uncorrectable"


def _gen_log():
    spec = importlib.util.spec_from_file_location("gen_log", REPO / "bench" / "gen_log.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_archive(root: Path, *, generated: int = 12, size_mb: float = 0.6) -> dict[str, int]:
    """Realworld cases + `generated` ECC logs (plain/gz/zst in turn) + a corrupt gzip + a
    truncated zstd. Returns counts by kind."""
    for case in sorted(p for p in REALWORLD.iterdir() if p.is_dir()):
        dest = root / "realworld" / case.name
        dest.mkdir(parents=True)
        shutil.copy(case / "log.txt", dest / "log.txt")
        shutil.copy(case / "label.json", dest / "label.json")
    gen = _gen_log()
    kinds = [None, "gz", "zst"]
    for i in range(generated):
        compression = kinds[i % 3]
        suffix = {None: ".log", "gz": ".log.gz", "zst": ".log.zst"}[compression]
        gen.generate(root / "generated" / f"job-{i:03d}{suffix}", size_mb, seed=i, compression=compression)
    (root / "broken").mkdir()
    good = gzip.compress(b"step 1 loss 2.0\n" * 2000)
    # a valid header and then garbage: the deflate stream is corrupt, not merely cut short
    (root / "broken" / "corrupt.log.gz").write_bytes(good[:40] + os.urandom(4000))
    zst = (root / "generated" / "job-002.log.zst").read_bytes()
    (root / "broken" / "truncated.log.zst").write_bytes(zst[: len(zst) // 2])
    return {"realworld": sum(1 for _ in (root / "realworld").iterdir()), "generated": generated, "corrupt": 1,
            "truncated": 1}


def rules_without(dest: Path, rule_id: str = REMOVED_RULE) -> Path:
    """A copy of the shipped library with one rule removed: the rule change to re-label after."""
    shutil.copytree(SHIPPED_RULES, dest)
    for path in dest.rglob("*.yaml"):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        if isinstance(doc, dict) and any(r.get("id") == rule_id for r in doc.get("rules") or []):
            doc["rules"] = [r for r in doc["rules"] if r.get("id") != rule_id]
            path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), encoding="utf-8")
            return dest
    raise AssertionError(f"rule {rule_id} not found")


def cli_env(data_dir: Path, database_url: str | None, **extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "LOGDX_DATA_DIR": str(data_dir),
           "LOGDX_RULES_DIR": str(SHIPPED_RULES), **extra}
    env.pop("LOGDX_DATABASE_URL", None)
    if database_url:
        env["LOGDX_DATABASE_URL"] = database_url
    return env


def run_cli(args: list[str], env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


def start_cli(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    out = open(log, "ab")  # noqa: SIM115
    return subprocess.Popen([sys.executable, "-m", "app.cli", *args], cwd=REPO, env=env, stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True)


def kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def wait_for(predicate, timeout: float, what: str, every: float = 0.1):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")
