"""Fit the compressed log into a token budget, keeping evidence first.

Lines of the compressed text carry their original line numbers (`L123:`, `L10-40 ×31:`, `~L55:`
context, `!L77:` flagged). Priorities: evidence lines of the candidate events > their nearby
context and flagged lines > header > other templates. Lowest priority goes first; the survivors
keep their original order and each gap is marked with how many lines were left out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import regex

_LINE_RE = regex.compile(r"^(?P<mark>[!~ ]?)L(?P<first>\d+)(?:-(?P<last>\d+))?")
MAX_LINE_CHARS = 400
NEAR = 3


@dataclass(frozen=True)
class LogLine:
    index: int
    text: str
    line: int | None  # original line number; None for header lines
    flagged: bool
    context: bool


def parse_compressed(text: str) -> list[LogLine]:
    out = []
    for i, raw in enumerate(text.splitlines()):
        m = _LINE_RE.match(raw)
        if m:
            out.append(LogLine(i, raw, int(m.group("first")), m.group("mark") == "!", m.group("mark") == "~"))
        else:
            out.append(LogLine(i, raw, None, False, False))
    return out


def line_texts(text: str) -> dict[int, str]:
    """Original line number -> its text in the compressed log (without the `L123:` prefix)."""
    out: dict[int, str] = {}
    for ll in parse_compressed(text):
        if ll.line is not None:
            out.setdefault(ll.line, ll.text.split(": ", 1)[1] if ": " in ll.text else ll.text)
    return out


def _clip(s: str) -> str:
    return s if len(s) <= MAX_LINE_CHARS else s[:MAX_LINE_CHARS] + " …[cut]"


def fit_log(text: str, budget_tokens: int, count: Callable[[str], int], *,
            evidence_lines: Iterable[int] = ()) -> tuple[str, int]:
    """(fitted text, tokens it takes). Always returns something within budget (possibly empty)."""
    lines = parse_compressed(text)
    evidence = set(evidence_lines)

    def priority(ll: LogLine) -> tuple[int, int]:
        if ll.line is None:
            return (1, 0)
        dist = min((abs(ll.line - e) for e in evidence), default=10**9)
        if dist == 0:
            return (4, 0)
        if dist <= NEAR or ll.flagged:
            return (3, -dist)
        if ll.context:
            return (2, -dist)
        return (0, -ll.index)  # other templates: earlier lines go first (the end holds the crash)

    order = sorted(lines, key=priority, reverse=True)
    costs = {ll.index: count(_clip(ll.text) + "\n") for ll in lines}
    marker_cost = count("… 999 line(s) omitted\n")
    kept: set[int] = set()
    used = 0
    for ll in order:
        cost = costs[ll.index] + marker_cost
        if used + cost > budget_tokens:
            continue
        kept.add(ll.index)
        used += cost
    out: list[str] = []
    skipped = 0
    for ll in lines:
        if ll.index in kept:
            if skipped:
                out.append(f"… {skipped} line(s) omitted")
                skipped = 0
            out.append(_clip(ll.text))
        else:
            skipped += 1
    if skipped:
        out.append(f"… {skipped} line(s) omitted")
    fitted = "\n".join(out)
    return fitted, count(fitted)
