"""Fixtures shared by the core tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

RULES_MIN = Path(__file__).resolve().parents[1] / "data" / "rules_min"


@pytest.fixture
def rules_dir(tmp_path, monkeypatch):
    """A writable copy of the minimal rule library (tests/data/rules_min), with a rules cache of
    its own, for tests that add or break rule files."""
    monkeypatch.setenv("LOGDX_RULES_CACHE_DIR", str(tmp_path / "cache"))
    target = tmp_path / "rules"
    shutil.copytree(RULES_MIN, target)
    return target
