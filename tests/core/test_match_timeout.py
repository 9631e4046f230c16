"""A `regex` search's timeout is wall-clock time, so it also runs out while the process waits for
a CPU. A diagnosis must not change because the host was busy: a search that ran out of its short
bound is tried again under a long one. A pattern that backtracks still ends, and after a few long
timeouts it gets the short bound only. (A short bound of 0 s stands here for a process that was
descheduled for longer than the bound: the search runs out before it starts.)"""

from __future__ import annotations

import io
from dataclasses import dataclass

import pytest
import regex

import app.core.rules as rules_module
from app.core.matcher import MultiMatcher
from app.core.pipeline import Pipeline
from app.core.rules import bounded_search

OVERFLOW_EXIT = [
    "  File \"/gpt-neox/megatron/training.py\", line 1002, in train_step",
    "    overflow_monitor.check(skipped_iter)  # check for repeated overflow",
    "Exception: Skipped 50 iterations in a row due to Overflow - Exiting training.",
]


@pytest.fixture(scope="module")
def pipe():
    return Pipeline()


@pytest.fixture
def busy_host(monkeypatch):
    monkeypatch.setattr(rules_module, "MATCH_TIMEOUT_S", 0.0)
    monkeypatch.setattr(rules_module, "_LONG_TIMEOUTS", {})


def _root(pipe, lines):  # noqa: ANN001
    return pipe.diagnose(io.BytesIO(("\n".join(lines) + "\n").encode())).diagnosis.root_cause


def test_a_busy_host_does_not_change_the_diagnosis(pipe, busy_host):
    root = _root(pipe, OVERFLOW_EXIT)
    assert (root.error_type.value, root.rule_id) == ("NaNLoss", "loss-scale-collapse")


@dataclass(frozen=True)
class _Rule:
    regex: regex.Pattern


def test_named_groups_survive_a_short_bound_that_ran_out(busy_host):
    matcher = MultiMatcher([_Rule(regex.compile(r"NCCL WARN .* rank (?P<rank>\d+)")),
                            _Rule(regex.compile(r"(?<=: )Xid (?P<xid>\d+)"))])  # (the second RE2 cannot run)
    hits = matcher.hits("node-3 kernel: NVRM: Xid 79, pid=1: GPU has fallen off the bus. NCCL WARN x rank 5")
    assert sorted(h.groups.get("rank") or h.groups["xid"] for h in hits) == ["5", "79"]


class _Recorded:
    """A compiled pattern that notes the bound of every search."""

    def __init__(self, rx: regex.Pattern) -> None:
        self.rx, self.pattern, self.flags, self.bounds = rx, rx.pattern, rx.flags, []

    def search(self, text: str, timeout: float):
        self.bounds.append(timeout)
        return self.rx.search(text, timeout=timeout)


def test_a_backtracking_pattern_gets_the_short_bound_after_a_few_long_timeouts(monkeypatch):
    monkeypatch.setattr(rules_module, "_LONG_TIMEOUTS", {})
    monkeypatch.setattr(rules_module, "MATCH_RETRY_TIMEOUT_S", 0.2)
    rx = _Recorded(regex.compile(r"(?:a|aa)+(?<!a)b"))
    limit = rules_module.MATCH_RETRY_LIMIT
    for _ in range(limit + 2):
        with pytest.raises(TimeoutError):
            bounded_search(rx, "a" * 60)
    short, long = rules_module.MATCH_TIMEOUT_S, 0.2
    assert rx.bounds == [short, long] * limit + [short, short]
    # another pattern still gets its second try
    other = _Recorded(regex.compile(r"b$"))
    monkeypatch.setattr(rules_module, "MATCH_TIMEOUT_S", 0.0)
    assert bounded_search(other, "a" * 60 + "b") is not None
    assert other.bounds == [0.0, 0.2]
