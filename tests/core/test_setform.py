"""The RE2 set runs each rule in its `set_form`: it must match exactly the lines the rule matches."""

from __future__ import annotations

import random

import pytest
import re2
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.matcher import SET_OPTIONS, MultiMatcher, re2_form
from app.core.rules import load_rules
from app.core.setform import set_form


@pytest.fixture(scope="module")
def ruleset():
    return load_rules()


def _patterns(ruleset):
    out = []
    for rule in [*ruleset.diagnosis, *ruleset.filters]:
        text = rule.regex.re2_text
        if text is not None:
            out.append((rule, text))
    return out


@pytest.mark.parametrize(("pattern", "expected"), [
    # a launcher/NCCL prefix that only feeds capture groups, and a trailing optional detail
    (r"(?:(?P<host>[\w.-]+):(?P<pid>\d+):\d+ \[(?P<gpu>\d+)\] )?[^\n]*?NCCL WARN (?P<d>.*)?", "NCCL WARN "),
    (r"(?:\[rank(?P<rank>\d+)\]:.*?)?CUDA out of memory", "CUDA out of memory"),
    (r"(?i:(?:x)?foo|bar(?: baz)?)", "(?i:foo|bar)"),  # per alternative, inside a flag group
    (r"x{0,3}y{2}z{1,}", "y{2}z{1,}"),
    (r"\x41?B\p{Greek}*", "B"),
    (r"[)|(]?x", "x"),  # brackets and bars inside a class are not structure
    (r"a\?b?", r"a\?"),  # an escaped ? is a literal, not a quantifier
])
def test_optional_ends_are_removed(pattern, expected):
    assert set_form(pattern) == expected


@pytest.mark.parametrize("pattern", [
    r"^(?:a)?b",  # anchored: the optional part decides where b may start
    r"foo(?:x)?$",
    r"(?i)(?:a)?b",  # inline flags scope what follows
    r"(?<=a)?b",
    r"(?:a|b)",
    r"a{,3}b",  # `{,3}` is a literal in RE2
    r"(a",  # unbalanced: left as written
    r"a)b",
    r"\1?x",
])
def test_what_it_does_not_understand_is_kept(pattern):
    assert set_form(pattern) == pattern


def test_every_rule_agrees_with_its_set_form_on_its_examples(ruleset):
    checked = 0
    for rule, text in _patterns(ruleset):
        full = re2.compile(_as_written(rule))
        short = re2.compile(text)
        for example in [*rule.spec.examples.match, *rule.spec.examples.no_match]:
            assert bool(full.search(example)) == bool(short.search(example)), (rule.id, example)
            checked += 1
    assert checked > 500


def test_the_cached_rule_form_is_the_set_form(ruleset):
    shortened = 0
    for rule, text in _patterns(ruleset):
        assert re2_form(rule.regex.pattern, rule.regex.flags) == text
        shortened += text != _as_written(rule)
    assert shortened >= 20  # the NCCL/IB/Xid rules with optional host and rank prefixes


def _as_written(rule) -> str:
    return f"(?i:{rule.regex.pattern})" if rule.regex.flags & regex.IGNORECASE else rule.regex.pattern


def _vocabulary(ruleset) -> list[str]:
    words: list[str] = []
    for rule in [*ruleset.diagnosis, *ruleset.filters]:
        for example in [*rule.spec.examples.match, *rule.spec.examples.no_match]:
            words.extend(example.split())
            words.append(example)
    return words


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_sets_of_full_and_set_forms_match_the_same_rules(ruleset, data):
    """Lines assembled from every rule's examples (whole examples, words, launcher prefixes):
    the set of rules that match is the same whether the set runs the patterns or their forms."""
    vocab = _full_sets(ruleset)[2]
    pieces = data.draw(st.lists(st.sampled_from(vocab), min_size=1, max_size=6))
    prefix = data.draw(st.sampled_from(["", "10.0.0.15: ", "[rank3]: ", "node-3:123:456 [2] ", "[1,4]<stdout>: "]))
    line = prefix + data.draw(st.sampled_from([" ", "", ": "])).join(pieces)
    full, short, _ = _full_sets(ruleset)
    assert sorted(full.Match(line) or ()) == sorted(short.Match(line) or ())


_CACHE: dict[int, tuple] = {}


def _full_sets(ruleset):
    key = id(ruleset)
    if key not in _CACHE:
        # (the patterns as written, all in one set, outgrow RE2's default 8 MiB program budget: the
        # matcher never builds this set, only the set forms' one, which it builds with its own
        # budget; the shipped forms outgrew the default on 2026-12-07)
        big = re2.Options()
        big.max_mem = 64 << 20
        full, short = re2.Set.SearchSet(big), re2.Set.SearchSet(SET_OPTIONS)
        for rule, text in _patterns(ruleset):
            full.Add(_as_written(rule))
            short.Add(text)
        full.Compile()
        short.Compile()
        _CACHE[key] = (full, short, _vocabulary(ruleset))
    return _CACHE[key]


def test_a_set_of_twice_the_shipped_rules_still_builds(ruleset):
    """The shipped rules' forms nearly fill RE2's default program budget for a set: the matcher's
    own budget leaves room for the rules engineers approve (here: every rule twice)."""
    rules = [*ruleset.diagnosis, *ruleset.diagnosis]
    matcher = MultiMatcher(rules)
    line = ruleset.diagnosis[0].spec.examples.match[0]
    assert matcher.match_indices(line)[:1] == [0]


def test_multimatcher_finds_the_same_rules_as_the_patterns(ruleset):
    """End to end: the matcher (set forms) against each rule's own `regex` search."""
    matcher = MultiMatcher(ruleset.diagnosis)
    rng = random.Random(7)
    examples = [e for r in ruleset.diagnosis for e in [*r.spec.examples.match, *r.spec.examples.no_match]]
    for _ in range(400):
        line = " ".join(rng.sample(examples, 2))
        expected = [i for i, r in enumerate(ruleset.diagnosis) if r.regex.search(line)]
        assert matcher.match_indices(line) == expected, line


def test_a_set_form_re2_rejects_falls_back_to_the_pattern(monkeypatch):
    """The set form is checked once, when the rule set is built: should it ever not compile, the
    set runs the pattern as written instead of failing to build."""
    import app.core.matcher as matcher

    monkeypatch.setattr(matcher, "set_form", lambda text: "(unbalanced")
    assert matcher.re2_form(r"(?:x)?NCCL WARN", 0) == r"(?:x)?NCCL WARN"


def test_digit_sensitivity_from_the_cached_forms_answers_as_computed_ones(ruleset):
    """The rules cache holds each diagnosis rule's relaxed-digit form (keptshapes.digit_form), so
    a process builds DigitSensitivity without relaxing 150 patterns: it answers exactly as one
    built from forms computed on the spot."""
    import copy

    from app.core.keptshapes import DigitSensitivity, digit_form

    fresh_rules = []
    for rule in ruleset.diagnosis:
        assert rule.regex.digit_form == digit_form(rule.regex.pattern, rule.regex.flags)
        lazy = copy.copy(rule.regex)
        lazy.digit_form = ...  # not computed: DigitSensitivity computes it
        fresh_rules.append(type(rule)(rule.spec, rule.source, lazy))
    assert sum(r.regex.digit_form is not None for r in ruleset.diagnosis) > 50
    cached, fresh = DigitSensitivity(ruleset.diagnosis), DigitSensitivity(fresh_rules)
    lines = [e for r in ruleset.diagnosis for e in [*r.spec.examples.match, *r.spec.examples.no_match]]
    lines += ["loss scale to: 0.25", "Xid 13 on GPU 0000:3b:00.0", "step 12 of 100 warning: odd on worker 3"]
    answers = [cached(line) for line in lines]
    assert answers == [fresh(line) for line in lines]
    assert any(answers) and not all(answers)
