"""The compiled rule-set cache: keyed by the rules' content, invalidated on change, and never a
way around validation."""

from __future__ import annotations

import pytest

from app.core import rules as rules_mod
from app.core.rules import RuleError, load_rules


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


@pytest.mark.parametrize("file, old, new, message", [
    ("diag.yaml", "    priority: 95\n", "    priority: 95\n    colour: red\n",
     "rule t-ecc: colour: Extra inputs are not permitted"),
    ("diag.yaml", "error_type: ECCError", "error_type: GremlinError", "rule t-ecc: error_type: Input should be"),
    ("diag.yaml", "id: t-ecc", "id: T ECC", "rule T ECC: id: String should match pattern"),
    ("diag.yaml", "priority: 95", "priority: 101", "rule t-ecc: priority: Input should be less than or equal to 100"),
    ("diag.yaml", "examples: {match: ['CUDA error: uncorrectable ECC error encountered']}", "examples: {match: []}",
     "rule t-ecc: examples.match: List should have at least 1 item"),
    ("diag.yaml", "role: symptom", "role: bystander", "rule t-watchdog: role: Input should be"),
    ("diag.yaml", "family: test\n", "family: test\nowner: me\n", "('owner',): Extra inputs are not permitted"),
    ("diag.yaml", "family: test\n", "", "('family',): Field required"),
    ("policies.yaml", "when: [low_confidence]", "when: [phase_of_moon]",
     "rule low-confidence: when: Value error, unknown condition(s) ['phase_of_moon']"),
    ("policies.yaml", "when: [low_confidence]", "when: [low_confidence]\n    preceded_by: '(unclosed'",
     "rule low-confidence: preceded_by: Value error, does not compile (missing )"),
], ids=["extra-key", "unknown-type", "bad-id", "priority-101", "no-examples", "unknown-role", "extra-header-key",
        "no-family", "unknown-condition", "preceded-by-does-not-compile"])
def test_a_bad_rule_file_is_refused_with_the_rule_and_field_named(rules_dir, file, old, new, message):
    load_rules(rules_dir)  # a good version is cached: it must not stand in for the bad one
    path = rules_dir / file
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new, 1))
    with pytest.raises(RuleError) as info:
        load_rules(rules_dir)
    assert str(info.value).startswith(f"{file}: ") and message in str(info.value)


def test_a_warm_cache_holds_plain_specs(rules_dir):
    """What the cache pickles must not need pydantic to load: the specs are dataclasses."""
    rs = load_rules(rules_dir)
    for obj in [*(r.spec for r in rs.diagnosis), *(r.spec for r in rs.filters), *rs.policies]:
        assert not any(c.__module__.startswith("pydantic") for c in type(obj).__mro__)
    assert rs.diagnosis[0].spec.error_type.value == "ECCError"
