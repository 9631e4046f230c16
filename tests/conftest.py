from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from app.core.pipeline import Pipeline
from app.core.rules import load_rules

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden"
# compiled rule sets are cached per run, not in the user's ~/.cache (see app/core/rules.py)
if "LOGDX_RULES_CACHE_DIR" not in os.environ:
    _RULES_CACHE = tempfile.mkdtemp(prefix="logdx-rules-cache-")
    atexit.register(shutil.rmtree, _RULES_CACHE, True)
    os.environ["LOGDX_RULES_CACHE_DIR"] = _RULES_CACHE


@pytest.fixture(scope="session")
def ruleset():
    return load_rules()


@pytest.fixture(scope="session")
def pipeline(ruleset):
    return Pipeline(ruleset)
