"""The compressed log as rows for the job page: each rendered line parsed back into its line
number(s), fold count, rank/host sets and text, with the diagnosis' evidence and co-occurring
errors attached. Pure: text and the diagnosis dict in, rows out."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# the format written by app.core.compressed.render
_ENTRY = re.compile(
    r"^(?P<mark>[! ~])L(?P<first>\d+)(?:-(?P<last>\d+) ×(?P<count>\d+))?"
    r"(?: ranks\[(?P<ranks>[^\]]*)\])?(?: hosts\[(?P<hosts>[^\]]*)\])?: (?P<text>.*)$")


@dataclass
class LogRow:
    first: int
    last: int
    count: int
    text: str
    kind: str  # "template" | "flagged" | "context"
    ranks: str = ""
    hosts: str = ""
    evidence: bool = False
    roles: list[tuple[str, str]] = field(default_factory=list)  # (role, error type) of co-occurring errors

    @property
    def folded(self) -> bool:
        return self.count > 1


@dataclass
class LogView:
    header: list[str]
    rows: list[LogRow]
    evidence_anchor: int | None  # first line of the first evidence row (for "jump to evidence")
    unmatched_evidence: list[dict[str, Any]]  # evidence lines not found among the rows


def parse(text: str) -> tuple[list[str], list[LogRow]]:
    header, rows = [], []
    for line in text.splitlines():
        if line.startswith("#"):
            header.append(line[1:].strip())
            continue
        m = _ENTRY.match(line)
        if m is None:
            if rows:  # a line the renderer did not write (should not happen): keep it visible
                rows.append(LogRow(rows[-1].last, rows[-1].last, 1, line, "context"))
            continue
        first = int(m["first"])
        kind = {"!": "flagged", "~": "context"}.get(m["mark"], "template")
        rows.append(LogRow(first=first, last=int(m["last"] or first), count=int(m["count"] or 1),
                           text=m["text"], kind=kind, ranks=m["ranks"] or "", hosts=m["hosts"] or ""))
    return header, rows


def _row_for(rows: list[LogRow], line: int) -> LogRow | None:
    """The row that printed `line`: the one starting there, else a folded error row spanning it."""
    for row in rows:
        if row.first == line:
            return row
    spanning = [r for r in rows if r.first <= line <= r.last and r.count > 1]
    flagged = [r for r in spanning if r.kind == "flagged"]
    return (flagged or spanning or [None])[0]


def build(text: str, diagnosis: dict[str, Any] | None) -> LogView:
    header, rows = parse(text)
    diagnosis = diagnosis or {}
    unmatched, anchor = [], None
    for ev in (diagnosis.get("root_cause") or {}).get("evidence") or []:
        row = _row_for(rows, int(ev.get("line") or 0))
        if row is None:
            unmatched.append(ev)
            continue
        row.evidence = True
        anchor = row.first if anchor is None else min(anchor, row.first)
    for co in diagnosis.get("co_occurring") or []:
        row = _row_for(rows, int(co.get("first_line") or 0))
        if row is not None:
            row.roles.append((co.get("role") or "", co.get("error_type") or ""))
    return LogView(header=header, rows=rows, evidence_anchor=anchor, unmatched_evidence=unmatched)
