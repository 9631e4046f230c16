"""Multi-pattern matching of one line against many rules.

All RE2-compatible patterns go into one `re2.Set` (a single pass over the line tells which rules
can match), or, `prefiltered`, into RE2's FilteredRE2 (`re2.Filter`: the literal atoms the
patterns need are matched first, then only the candidate patterns run; a large set builds DFA
states for every new kind of line, the filter does not, for a few ms more to build); patterns
RE2 cannot run (lookarounds, backreferences) are searched one by one with the `regex` module. Named groups are then extracted with `regex`, under a timeout (`bounded_search`), only for the
rules that matched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import re2
import regex

from app.core.rules import bounded_match, bounded_search
from app.core.setform import set_form


class _HasRegex(Protocol):
    @property
    def regex(self) -> regex.Pattern: ...


R = TypeVar("R", bound=_HasRegex)
_UNKNOWN = object()


def re2_form(pattern: str, flags: int) -> str | None:
    """The pattern as the RE2 set runs it (its `set_form`: only whether it matches counts there),
    or None when RE2 cannot run it identically. Rule sets cache this form."""
    text = _re2_compatible(pattern, flags)
    if text is None:
        return None
    short = set_form(text)
    return short if short == text or _re2_compatible(short, 0) is not None else text


def _re2_compatible(pattern: str, flags: int) -> str | None:
    """Return the pattern as RE2 should see it, or None when RE2 cannot run it identically."""
    text = pattern if not flags & regex.IGNORECASE else f"(?i:{pattern})"
    try:
        re2.compile(text)
    except Exception:  # re2.error and friends: not RE2 syntax
        return None
    return text


@dataclass(frozen=True)
class Hit(Generic[R]):
    rule: R
    groups: dict[str, str]


# RE2 bounds the program a set compiles to by its `max_mem` (8 MiB by default): the shipped
# diagnosis rules' forms alone took 7.4 MiB of it, then 8.1 MiB once CUDA's catalog also read
# HIP's words (both 2026-12-07), more than the default. The budget is a ceiling, not an allocation.
SET_OPTIONS = re2.Options()
SET_OPTIONS.max_mem = 64 << 20


class MultiMatcher(Generic[R]):
    """Which of `rules` match a line; preserves rule order in the result."""

    def __init__(self, rules: Sequence[R], *, prefiltered: bool = False) -> None:
        self.rules = list(rules)
        self._set = re2.Filter() if prefiltered else re2.Set.SearchSet(SET_OPTIONS)
        self._set_index: list[int] = []
        self._fallback: list[int] = []
        for i, rule in enumerate(self.rules):
            # rules from load_rules carry their RE2 form (checked once, when the cache was built)
            text = getattr(rule.regex, "re2_text", _UNKNOWN)
            if text is _UNKNOWN:
                text = re2_form(rule.regex.pattern, rule.regex.flags)
            if text is None:
                self._fallback.append(i)
            else:
                self._set.Add(text)
                self._set_index.append(i)
        if self._set_index:  # (a Filter without patterns does not compile)
            self._set.Compile()

    @property
    def fallback_count(self) -> int:
        return len(self._fallback)

    def match_indices(self, text: str) -> list[int]:
        found = [self._set_index[j] for j in (self._set.Match(text) or ())] if self._set_index else []
        for i in self._fallback:
            if bounded_match(self.rules[i].regex, text, timed_out=False):
                found.append(i)
        found.sort()
        return found

    def any(self, text: str) -> bool:
        if self._set_index and self._set.Match(text):
            return True
        return bool(self._fallback) and bool(self.match_indices(text))

    def first(self, text: str) -> int | None:
        found = self.match_indices(text)
        return found[0] if found else None

    def hits(self, text: str) -> list[Hit[R]]:
        out: list[Hit[R]] = []
        for i in self.match_indices(text):
            rule = self.rules[i]
            try:
                m = bounded_search(rule.regex, text)
            except TimeoutError:
                m = None
            if m is None:  # RE2 and regex disagree (rare semantics differences): trust regex
                continue
            out.append(Hit(rule, {k: v for k, v in m.groupdict().items() if v is not None}))
        return out
