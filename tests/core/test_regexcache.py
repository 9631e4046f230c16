"""Rule patterns rebuilt from cached compile arguments behave like `regex.compile`'s."""

from __future__ import annotations

import pickle

import pytest
import regex

from app.core import regexcache
from app.core.rules import LazyPattern, RuleError, compile_pattern_args, load_rules


def _outcome(pattern: regex.Pattern, text: str):
    m = pattern.search(text, timeout=1.0)
    return None if m is None else (m.span(), m.groupdict(), m.groups())


def test_every_rule_pattern_from_cached_arguments_matches_like_a_compiled_one():
    ruleset = load_rules()
    rules = [*ruleset.diagnosis, *ruleset.filters]
    checked = 0
    for rule in rules:
        lazy = pickle.loads(pickle.dumps(rule.regex))  # as a warm rules cache hands it over
        assert lazy.args is not None, rule.id
        fast = lazy.compiled
        slow = regex.compile(rule.regex.pattern, rule.regex.flags)
        assert (fast.pattern, fast.flags, fast.groupindex) == (slow.pattern, slow.flags, slow.groupindex), rule.id
        for text in [*rule.spec.examples.match, *rule.spec.examples.no_match]:
            for variant in (text, text.upper(), f"10.0.0.15: [rank3]: {text}", text[: len(text) // 2]):
                assert _outcome(fast, variant) == _outcome(slow, variant), (rule.id, variant)
                checked += 1
    assert checked > 2000


def test_arguments_of_another_regex_version_or_torn_ones_fall_back_to_compiling():
    compiled, args = regexcache.compile_with_args(r"loss (?P<loss>\d+\.\d+)", 0)
    assert args is not None and args[0] == regexcache.VERSION
    other = ("0.0.1", args[1])
    for cached in (other, (regexcache.VERSION, ("torn",)), None):
        again = regexcache.build(cached, compiled.pattern, compiled.flags)
        assert again.search("step 3 loss 1.25").group("loss") == "1.25"


def test_a_pattern_that_does_not_compile_is_still_a_rule_error():
    with pytest.raises(RuleError, match="does not compile"):
        compile_pattern_args("(unclosed", where="x.yaml: rule r")


def test_the_capture_leaves_regex_as_it_was():
    from regex import _main

    real = _main._regex
    regexcache.compile_with_args(r"a(b)c", regex.IGNORECASE)
    with pytest.raises(regex.error):
        regexcache.compile_with_args(r"a(b", 0)
    assert _main._regex is real
    assert regex.compile(r"x(?P<n>\d)").search("x5").group("n") == "5"


def test_a_lazy_pattern_without_arguments_compiles_as_before():
    lazy = LazyPattern(r"Xid (?P<xid>\d+)", 0, None)
    assert lazy.compiled.search("NVRM: Xid 79, GPU has fallen off the bus").group("xid") == "79"


def test_module_patterns_are_kept_in_a_file_and_built_from_it_by_the_next_process(tmp_path, monkeypatch):
    monkeypatch.setenv("LOGDX_RULES_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(regexcache, "_known", None)
    monkeypatch.setattr(regexcache, "_dirty", False)
    first = regexcache.compile(r"step (?P<step>\d+)", regex.IGNORECASE)
    assert first.search("STEP 12").group("step") == "12"
    regexcache._save()  # what the process does at exit
    saved = tmp_path / f"regex-{regexcache.VERSION}.pickle"
    assert saved.is_file()

    monkeypatch.setattr(regexcache, "_known", None)  # the next process
    built = []
    real_build = regexcache.build
    monkeypatch.setattr(regexcache, "build", lambda *a: built.append(a[1]) or real_build(*a))
    again = regexcache.compile(r"step (?P<step>\d+)", regex.IGNORECASE)
    assert built == [r"step (?P<step>\d+)"]  # from the file, not the parser
    assert (again.pattern, again.flags, again.groupindex) == (first.pattern, first.flags, first.groupindex)
    assert again.search("step 7").group("step") == "7"


def test_a_torn_pattern_file_or_no_cache_dir_only_costs_the_compile(tmp_path, monkeypatch):
    monkeypatch.setenv("LOGDX_RULES_CACHE_DIR", str(tmp_path))
    (tmp_path / f"regex-{regexcache.VERSION}.pickle").write_bytes(b"\x80\x05not a pickle")
    monkeypatch.setattr(regexcache, "_known", None)
    assert regexcache.compile(r"a+b").search("xaab").group() == "aab"
    monkeypatch.setenv("LOGDX_RULES_CACHE_DIR", "off")
    monkeypatch.setattr(regexcache, "_known", None)
    monkeypatch.setattr(regexcache, "_dirty", False)
    assert regexcache.compile(r"c+d").search("ccd").group() == "ccd"
    regexcache._save()  # nowhere to write: nothing happens
