"""A site's own rules: an overlay directory loaded beside the rules directory, `logdx rules
export` to start a library of one's own, and app/resources.py finding the shipped data (the
wheel's copy first, else the checkout's folders; tests/test_packaging.py runs the wheel)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app import resources
from app.core.pipeline import Pipeline
from app.core.rules import RuleError, check_examples, load_rules

REPO = Path(__file__).resolve().parents[2]

SITE_RULE = """kind: diagnosis
family: site
rules:
  - id: site-scratch-quota
    error_type: StorageError
    pattern: 'scratchfs: quota exceeded for project (?P<detail>\\w+)'
    examples: {match: ['scratchfs: quota exceeded for project llm7'], no_match: ['scratchfs: ok']}
"""


def logdx(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})


@pytest.fixture
def overlay(tmp_path: Path) -> Path:
    site = tmp_path / "site-rules"
    site.mkdir()
    (site / "site.yaml").write_text(SITE_RULE)
    return site


def test_the_checkout_serves_its_own_folders():
    for name, (folder, _) in resources.DATA.items():
        assert resources.data_dir(name) == REPO / folder, name
    assert resources.package_dir("web") == REPO / "app" / "web"
    with pytest.raises(KeyError, match="unknown data folder"):
        resources.data_dir("nope")


def test_packaged_data_comes_first(tmp_path, monkeypatch):
    """An installed wheel has app/_data/<name>: that copy is used, never a folder beside the package."""
    packaged = tmp_path / "app" / resources.PACKAGE_DATA / "rules"
    packaged.mkdir(parents=True)
    monkeypatch.setattr(resources, "_HERE", tmp_path / "app")
    resources.data_dir.cache_clear()
    try:
        assert resources.data_dir("rules") == packaged
        monkeypatch.setattr(resources, "CHECKOUT", tmp_path / "elsewhere")
        with pytest.raises(resources.DataNotFound, match="reinstall logdx"):
            resources.data_dir("prompts")
    finally:
        resources.data_dir.cache_clear()


def test_an_overlay_adds_its_rules_to_the_shipped_ones(overlay, tmp_path):
    shipped = load_rules(overlay=None)
    both = load_rules(overlay=overlay)
    assert {r.id for r in both.diagnosis} == {r.id for r in shipped.diagnosis} | {"site-scratch-quota"}
    assert both.version != shipped.version  # diagnoses record which rules decided
    assert str(overlay.resolve() / "site.yaml") in both.files
    assert check_examples(both) == []
    log = tmp_path / "job.log"
    log.write_text("step 3 loss 2.1\nscratchfs: quota exceeded for project llm7\n")
    assert Pipeline(overlay=overlay).diagnose(str(log)).diagnosis.root_cause.rule_id == "site-scratch-quota"


def test_the_overlay_comes_from_the_environment_by_default(overlay, monkeypatch):
    monkeypatch.setenv("LOGDX_RULES_OVERLAY", str(overlay))
    assert "site-scratch-quota" in {r.id for r in load_rules().diagnosis}
    monkeypatch.setenv("LOGDX_RULES_OVERLAY", "")
    assert "site-scratch-quota" not in {r.id for r in load_rules().diagnosis}


def test_a_rule_id_defined_twice_names_both_files(overlay):
    (overlay / "clash.yaml").write_text(SITE_RULE.replace("site-scratch-quota", "cuda-ecc-uncorrectable"))
    with pytest.raises(RuleError) as err:
        load_rules(overlay=overlay)
    message = str(err.value)
    assert str(overlay.resolve() / "clash.yaml") in message
    assert str(resources.rules_dir() / "cuda.yaml") in message
    assert "LOGDX_RULES_DIR" in message  # how to change a shipped rule instead


def test_a_missing_overlay_is_an_error_not_ignored(tmp_path):
    with pytest.raises(RuleError, match="overlay directory not found"):
        load_rules(overlay=tmp_path / "nowhere")
    with pytest.raises(RuleError, match="is the rules directory itself"):
        load_rules(resources.rules_dir(), overlay=resources.rules_dir())


def test_the_cli_reads_the_overlay_and_the_rules_dir_from_the_environment(overlay, tmp_path):
    log = tmp_path / "job.log"
    log.write_text("scratchfs: quota exceeded for project llm7\n")
    out = logdx("diagnose", str(log), "--json", env={"LOGDX_RULES_OVERLAY": str(overlay)})
    assert out.returncode == 0 and '"rule_id": "site-scratch-quota"' in out.stdout, out.stderr
    tested = logdx("rules", "test", "--overlay", str(overlay))
    assert tested.returncode == 0 and "FAIL" not in tested.stdout
    missing = logdx("rules", "test", env={"LOGDX_RULES_DIR": str(tmp_path / "nowhere")})
    assert missing.returncode == 2 and "rules directory not found" in missing.stderr


def test_rules_export_writes_the_shipped_rules_and_keeps_a_full_directory(tmp_path):
    target = tmp_path / "exported"
    out = logdx("rules", "export", str(target))
    assert out.returncode == 0, out.stderr
    shipped = sorted(p.relative_to(resources.rules_dir()) for p in resources.rules_dir().rglob("*.yaml"))
    assert sorted(p.relative_to(target) for p in target.rglob("*.yaml")) == shipped
    assert (target / "nccl.yaml").read_bytes() == (resources.rules_dir() / "nccl.yaml").read_bytes()
    # an exported library is a working rules directory
    assert load_rules(target, overlay=None).version == load_rules(overlay=None).version

    (target / "nccl.yaml").write_text("# a site's edit\n")
    again = logdx("rules", "export", str(target))
    assert again.returncode == 2 and "not empty" in again.stderr
    assert (target / "nccl.yaml").read_text() == "# a site's edit\n"  # nothing written
    forced = logdx("rules", "export", str(target), "--force")
    assert forced.returncode == 0
    assert (target / "nccl.yaml").read_bytes() == (resources.rules_dir() / "nccl.yaml").read_bytes()
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert logdx("rules", "export", str(a_file)).returncode == 2
