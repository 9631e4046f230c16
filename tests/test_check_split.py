"""bench/check_split.py: a collected split is checked before it is scored or moved into the corpus."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _case(root: Path, name: str, **over) -> None:
    meta = {"source": f"https://github.com/example-org/example-repo/issues/{900000 + sum(map(ord, name))}",
            "source_kind": "issue-thread", "repo": "example-org/example-repo", "root_cause": "OutOfMemoryError",
            "category": "framework", "action": "no_retry", "suspect_hosts": [], "suspect_ranks": [],
            "co_occurring": [{"error_type": "NCCLTimeoutError", "role": "symptom"}], "negative_control": False,
            "evidence": "torch.OutOfMemoryError: CUDA out of memory.", "label_evidence": "maintainer", "confidence": "high",
            "why": "GPU memory ran out."}
    meta.update(over)
    (root / name).mkdir()
    (root / name / "log.txt").write_text("step 1 loss 2.0\ntorch.OutOfMemoryError: CUDA out of memory.\n")
    (root / name / "meta.json").write_text(json.dumps(meta))


def _run(*dirs: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "bench/check_split.py", *map(str, dirs)], cwd=REPO, capture_output=True,
                          text=True)


def test_a_well_formed_split_passes_and_reports_its_mix(tmp_path):
    _case(tmp_path, "sz-good-oom")
    out = _run(tmp_path)
    assert out.returncode == 0, out.stdout
    assert "1 cases, 0 with problems" in out.stdout and "co-occurring 1 (100%" in out.stdout


def test_each_kind_of_problem_is_named(tmp_path):
    _case(tmp_path, "sz-a-evidence", evidence="a line that is not in the log")
    _case(tmp_path, "sz-b-type-key", co_occurring=[{"type": "NCCLTimeoutError", "role": "symptom"}])
    _case(tmp_path, "sz-c-negative", negative_control=True)
    _case(tmp_path, "sz-d-enum", root_cause="OOM")
    corpus = json.loads(next((REPO / "tests" / "golden" / "corpus").glob("*/meta.json")).read_text())["source"]
    _case(tmp_path, "sz-e-known", source=corpus)
    out = _run(tmp_path)
    assert out.returncode == 1
    lines = {line.split(":")[0]: line for line in out.stdout.splitlines()}
    assert "not a verbatim line" in lines["sz-a-evidence"]
    assert "co_occurring entry" in lines["sz-b-type-key"]
    assert "negative control" in lines["sz-c-negative"]
    assert "root_cause 'OOM'" in lines["sz-d-enum"]
    assert "already in the corpus" in lines["sz-e-known"]
