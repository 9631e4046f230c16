"""`logdx relabel` refuses bad usage with one line and exit code 2, before doing any work."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from app.cli import cli
from tests.relabel.conftest import rules_without


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("LOGDX_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("LOGDX_DATABASE_URL", raising=False)
    monkeypatch.delenv("LOGDX_RULES_DIR", raising=False)
    return tmp_path


@pytest.mark.parametrize("args, message", [
    (["--resume", "999"], "re-labeling run 999 does not exist"),
    (["--enqueue-only"], "--enqueue-only needs LOGDX_DATABASE_URL"),
    (["--archive", "/nonexistent/logs/*.gz"], "no such directory, file or glob match"),
    (["--error-type", "NotAType"], "bad filter error_type"),
])
def test_bad_usage_is_one_line_and_exit_2(env, args, message):
    result = CliRunner().invoke(cli, ["relabel", "--quiet", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_bad_rules_are_refused(env):
    bad = rules_without(env / "bad")
    (bad / "broken.yaml").write_text("kind: diagnosis\nfamily: broken\nrules:\n  - id: x\n    error_type: Nope\n"
                                     "    pattern: 'x'\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["relabel", "--rules", str(bad), "--quiet"])
    assert result.exit_code == 2 and "bad rules" in result.output
