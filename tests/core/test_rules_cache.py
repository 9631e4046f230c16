"""The compiled rule-set cache: keyed by the rules' content, invalidated on change, and never a
way around validation."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from app.core import rules as rules_mod
from app.core.rules import RuleError, load_rules

RULES_MIN = Path(__file__).resolve().parents[1] / "data" / "rules_min"


@pytest.fixture
def rules_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LOGDX_RULES_CACHE_DIR", str(tmp_path / "cache"))
    target = tmp_path / "rules"
    shutil.copytree(RULES_MIN, target)
    return target


def _summary(rs):
    return ([(r.id, r.regex.pattern, r.spec) for r in rs.diagnosis], [(r.id, r.regex.pattern) for r in rs.filters],
            rs.policies, rs.version, rs.files)


def test_a_warm_cache_gives_the_same_rules_without_parsing_yaml(rules_dir, tmp_path, monkeypatch):
    cold = load_rules(rules_dir)
    assert len(list((tmp_path / "cache").glob("*.pickle"))) == 1

    def no_yaml(path):
        raise AssertionError(f"parsed {path} although the cache is warm")

    monkeypatch.setattr(rules_mod, "_load_file", no_yaml)
    warm = load_rules(rules_dir)
    assert _summary(warm) == _summary(cold)
    line = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
    assert [r.id for r in warm.diagnosis if r.regex.search(line)] == [r.id for r in cold.diagnosis if r.regex.search(line)]
    assert warm.matchers()[1].any(line)


def test_a_changed_rule_file_invalidates_the_cache(rules_dir):
    before = load_rules(rules_dir)
    diag = rules_dir / "diag.yaml"
    diag.write_text(diag.read_text().replace("uncorrectable ECC error", "uncorrectable  ECC error"))
    after = load_rules(rules_dir)
    assert after.version != before.version
    assert any("uncorrectable  ECC error" in r.regex.pattern for r in after.diagnosis)


def test_a_bad_rule_fails_fast_even_after_a_good_version_was_cached(rules_dir):
    load_rules(rules_dir)
    diag = rules_dir / "diag.yaml"
    diag.write_text(diag.read_text().replace("uncorrectable ECC error", "uncorrectable (ECC error"))
    with pytest.raises(RuleError, match="does not compile"):
        load_rules(rules_dir)


def test_a_corrupt_cache_file_is_rebuilt(rules_dir, tmp_path):
    good = load_rules(rules_dir)
    (cache,) = (tmp_path / "cache").glob("*.pickle")
    cache.write_bytes(b"\x80\x05garbage")
    again = load_rules(rules_dir)
    assert _summary(again) == _summary(good)
    assert cache.read_bytes() != b"\x80\x05garbage"


def test_cache_off(rules_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("LOGDX_RULES_CACHE_DIR", "off")
    load_rules(rules_dir)
    assert not (tmp_path / "cache").exists()


def test_the_cache_keeps_only_the_newest_rule_sets(rules_dir, tmp_path):
    cache = tmp_path / "cache"
    diag = rules_dir / "diag.yaml"
    text = diag.read_text()
    for i in range(rules_mod.CACHE_KEEP + 5):
        diag.write_text(text + f"\n# edit {i}\n")
        load_rules(rules_dir)
    assert len(list(cache.glob("*.pickle"))) == rules_mod.CACHE_KEEP
