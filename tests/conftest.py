from __future__ import annotations

from pathlib import Path

import pytest

from app.core.pipeline import Pipeline
from app.core.rules import load_rules

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden"


@pytest.fixture(scope="session")
def ruleset():
    return load_rules()


@pytest.fixture(scope="session")
def pipeline(ruleset):
    return Pipeline(ruleset)
