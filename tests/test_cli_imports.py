"""Import discipline of the CLI's everyday commands: a Slurm epilog runs `logdx diagnose` once per
job, so diagnosing or compressing a log must not load the service, the database, the LLM layer
or the ML stack. A behaviour test (which modules a real run loaded); the start-up time itself is
measured by bench/bench_startup.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# what `logdx diagnose FILE` / `logdx compress FILE` without --llm never needs
FORBIDDEN = ("sqlalchemy", "alembic", "fastapi", "starlette", "uvicorn", "openai", "httpx", "torch",
             "transformers", "sentence_transformers", "numpy", "app.api", "app.db", "app.llm",
             "app.controller", "app.web", "app.diagnoses", "app.service_cli", "app.settings",
             "app.relabel", "app.jobs", "app.failures",
             # a plain log needs no gzip or zstd decoder, no `statistics` (it pulls in decimal and
             # fractions)
             "isal", "zstandard", "statistics")

# runs the console-script entry point (app.cli:main) and reports the modules it loaded, from an
# atexit handler (main ends diagnose/compress with os._exit, after running those); the exit code
# is the process's
RUNNER = """
import atexit, json, sys

def report():
    with open(OUT, "w") as fh:
        json.dump({"modules": sorted(sys.modules)}, fh)

atexit.register(report)
from app.cli import main
sys.argv = ["logdx", *json.loads(sys.argv[1])]
main()
"""


def run_cli(tmp_path: Path, *args: str, cache: Path) -> tuple[subprocess.CompletedProcess, dict]:
    report = tmp_path / "modules.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), "LOGDX_RULES_CACHE_DIR": str(cache), "LOGDX_LLM_BACKEND": "none"}
    out = subprocess.run([sys.executable, "-c", f"OUT = {str(report)!r}\n" + RUNNER, json.dumps(args)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    return out, json.loads(report.read_text())


def offending(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]


@pytest.fixture
def one_line(tmp_path: Path) -> Path:
    log = tmp_path / "one.log"
    log.write_text("hello world\n")
    return log


@pytest.mark.parametrize("args", [("diagnose", "--json"), ("diagnose",), ("compress",)],
                         ids=["diagnose-json", "diagnose-text", "compress"])
def test_everyday_commands_load_no_service_llm_or_ml_module(tmp_path, one_line, args):
    out, report = run_cli(tmp_path, args[0], str(one_line), *args[1:], cache=tmp_path / "cache")
    assert offending(report["modules"]) == []
    if args == ("diagnose", "--json"):
        d = json.loads(out.stdout)
        # the rules' own answer: nothing unexplained for example retrieval to read
        assert (d["root_cause"]["error_type"], d["decided_by"]) == ("Unknown", "rules")
        assert "rich" not in report["modules"]  # JSON needs no terminal rendering
    elif args == ("diagnose",):
        assert "rich" not in report["modules"]  # not a terminal: plain text (colour only on one)
    elif args == ("compress",):
        assert out.stdout.splitlines()[-1].endswith("hello world")


def test_a_warm_rules_cache_parses_no_yaml(tmp_path, one_line):
    cache = tmp_path / "cache"
    _, cold = run_cli(tmp_path, "diagnose", str(one_line), "--json", cache=cache)
    assert "yaml" in cold["modules"]  # the cold start validated the rule files
    assert "pydantic" in cold["modules"]  # ... with the full checks
    assert list(cache.glob("*.pickle"))
    _, warm = run_cli(tmp_path, "diagnose", str(one_line), "--json", cache=cache)
    assert "yaml" not in warm["modules"]


# pydantic (and what it brings) checks rule files and untrusted diagnoses; building the contract in
# code and reading a warm rules cache need none of it (its import and validators were a third of
# the start-up)
VALIDATION_ONLY = ("pydantic", "pydantic_core", "annotated_types")


@pytest.mark.parametrize("args", [("diagnose", "--json"), ("diagnose",), ("compress",)],
                         ids=["diagnose-json", "diagnose-text", "compress"])
def test_a_warm_rules_cache_loads_no_pydantic(tmp_path, one_line, args):
    cache = tmp_path / "cache"
    run_cli(tmp_path, "compress", str(one_line), cache=cache)  # writes the rules cache
    out, report = run_cli(tmp_path, args[0], str(one_line), *args[1:], cache=cache)
    assert out.stdout.strip()
    assert [m for m in report["modules"] if m.split(".")[0] in VALIDATION_ONLY] == []
    assert "app.core.types" in report["modules"] and "app.core.rules" in report["modules"]


def test_an_unexplained_error_line_still_reaches_example_retrieval(tmp_path):
    """The lazy path must not skip the fallback when there is something for it to read: a line
    that looks like an error but that no rule types loads the LLM layer's example retrieval."""
    log = tmp_path / "odd.log"
    log.write_text("step 1 loss 2.0\nFrobnicatorError: the widget bus refused the handshake\n")
    _, report = run_cli(tmp_path, "diagnose", str(log), "--json", cache=tmp_path / "cache")
    assert "app.llm.factory" in report["modules"]
