"""Compress: drop metric/progress/chatter lines, fold repeats, keep every error with context.

The hot path never runs a regex on most lines. Each chunk is digit-masked in one C call
(`bytes.translate`) and every line's *shape* (the masked line) is looked up in a dict of shapes
already judged droppable; selection, counting and splitting are done by C-level iterators
(`map`, `itertools.compress`, `Counter`). Only lines with a shape never seen before, or shapes
that survive, reach Python code and the rules. A new shape is dropped only when a filter rule
matches it AND no diagnosis rule does (an error line is never dropped).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import compress
from operator import not_
from pathlib import Path
from typing import BinaryIO

import regex

from app.core.fields import DIGIT_MASK_BYTES, DIGIT_MASK_STR, extract_host, extract_rank, extract_time, fold_key
from app.core.ingest import CHUNK_SIZE, LINE_CAP, IngestReport, iter_chunks
from app.core.matcher import Hit, MultiMatcher
from app.core.rules import MATCH_TIMEOUT_S, DiagnosisRule, FilterRule, RuleSet
from app.core.types import CompressionStats, Progress

CONTEXT_BEFORE = 2
CONTEXT_AFTER = 2
MAX_TEMPLATES = 50_000
MAX_SHAPE_CACHE = 200_000
MAX_OCCURRENCES_PER_RULE = 2_000
METRIC_SAMPLES_PER_CHUNK = 512
MAX_SET_MEMBERS = 512

_ERROR_HINT = regex.compile(
    r"Traceback \(most recent call last\)|Error\b|Exception\b|\berror\b|\bERROR\b|\bFATAL\b|\bfatal\b|"
    r"\bfailed\b|\bFAILED\b|\bKilled\b|\bkilled\b|\bWARN\b|[Ss]egmentation fault|core dumped|\babort|"
    r"timed out|[Tt]imeout|\bnan\b|\bNaN\b|\binf\b|CANCELLED|[Pp]anic|Errno")
_CHAIN_RE = regex.compile(
    r"During handling of the above exception, another exception occurred|"
    r"The above exception was the direct cause of the following exception")
_BINARY_RE = regex.compile(r"[\x00-\x08\x0e-\x1f\ufffd]")


@dataclass
class Template:
    """One folded line shape, in order of first appearance."""

    text: str
    first_line: int
    last_line: int
    count: int = 1
    ranks: set[int] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    flagged: bool = False  # an error rule or the error heuristic fired on it


@dataclass
class Occurrence:
    """One line a diagnosis rule matched (kept for evidence, capped per rule)."""

    line: int
    text: str
    rule: DiagnosisRule
    groups: dict[str, str]
    rank: int | None
    host: str | None
    after_chain_marker: bool = False


@dataclass
class MetricPoint:
    line: int
    step: int | None
    values: dict[str, float]
    text: str = ""


@dataclass
class CompressedLog:
    templates: list[Template]
    context: dict[int, str]  # line number -> raw text of context lines around errors
    occurrences: list[Occurrence]
    rule_counts: Counter  # diagnosis rule id -> number of matching lines (uncapped)
    metrics: list[MetricPoint]
    nan_points: list[MetricPoint]
    last_progress: Progress | None
    stats: CompressionStats
    known_ranks: set[int]
    known_hosts: set[str]
    flagged_lines: list[tuple[int, str]]  # error-looking lines no rule explained (first ones)

    @property
    def text(self) -> str:
        return render(self)


def _decode(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace")
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    return text


def _float(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return float(value.strip().rstrip(","))
    except ValueError:
        low = value.strip().lower()
        if "nan" in low:
            return math.nan
        if "inf" in low:
            return math.inf
        return None


class Compressor:
    """Streaming compressor; feed chunks with `feed`, then call `finish`."""

    def __init__(self, ruleset: RuleSet, *, line_cap: int = LINE_CAP) -> None:
        self.ruleset = ruleset
        self.filters = MultiMatcher[FilterRule](ruleset.filters)
        self.diag = MultiMatcher[DiagnosisRule](ruleset.diagnosis)
        self.line_cap = line_cap
        self._drop: dict[bytes, int] = {}  # shape -> filter rule index
        self._keep: set[bytes] = set()  # shapes judged not droppable
        self._str_drop: dict[str, int] = {}  # the same for \r segments (str shapes)
        self._extract: dict[bytes, int] = {}  # droppable shapes whose rule extracts metrics
        self._progress_shapes: set[bytes] = set()
        self._dropped_shapes: Counter = Counter()
        self._str_dropped: Counter = Counter()
        self._templates: dict[str, Template] = {}
        self._context: dict[int, str] = {}
        self._occ: list[Occurrence] = []
        self._occ_per_rule: Counter = Counter()
        self.rule_counts: Counter = Counter()
        self._metrics: list[MetricPoint] = []
        self._nan: list[MetricPoint] = []
        self._last_progress: tuple[int, bytes] | None = None
        self._flagged: list[tuple[int, str]] = []
        self._known_ranks: set[int] = set()
        self._known_hosts: set[str] = set()
        self._chain_pending: set[int | None] = set()
        self._tail: list[bytes] = []  # last lines of the previous chunk (context before)
        self._after = 0  # context lines still owed after the last error
        self.lines_in = 0
        self.bytes_in = 0
        self.lines_cut = 0
        self.overflow_lines = 0

    # ---- hot path -------------------------------------------------------------------------
    def feed(self, chunk: bytes) -> None:
        self.bytes_in += len(chunk)
        lines = chunk.split(b"\n")
        shapes = chunk.translate(DIGIT_MASK_BYTES).split(b"\n")
        if not lines[-1]:
            lines.pop()
            shapes.pop()
        n = len(lines)
        base = self.lines_in + 1  # 1-based line number of lines[0]
        self.lines_in += n
        if self._after:
            self._owe_context(lines, base)
        drop = self._drop
        dropped = list(map(drop.__contains__, shapes))
        self._dropped_shapes.update(compress(shapes, dropped))
        for i in compress(range(n), map(not_, dropped)):
            self._survivor(lines, shapes, i, base)
        if self._extract:
            self._sample_metrics(lines, shapes, base)
        if self._progress_shapes:
            for i in range(n - 1, -1, -1):
                if shapes[i] in self._progress_shapes:
                    self._last_progress = (base + i, lines[i])
                    break
        self._tail = lines[-CONTEXT_BEFORE:]

    # ---- per surviving line ---------------------------------------------------------------
    def _survivor(self, lines: list[bytes], shapes: list[bytes], i: int, base: int) -> None:
        raw, shape = lines[i], shapes[i]
        line_no = base + i
        if len(raw) > self.line_cap:
            raw = raw[: self.line_cap] + b" [logdx: line cut at %d bytes]" % self.line_cap
            self.lines_cut += 1
        text = _decode(raw)
        if "\r" in text:
            segments = [s for s in text.split("\r") if s.strip()]
            for seg in segments:
                if not self._drop_segment(seg, line_no):
                    self._keep_line(seg, line_no, lines, i, base)
            return
        if shape not in self._keep and len(shape) <= self.line_cap:
            idx = self._judge(text)
            if idx is not None:
                self._remember_drop(shape, idx, text, line_no)
                self._dropped_shapes[shape] += 1
                return
            if len(self._keep) < MAX_SHAPE_CACHE:
                self._keep.add(shape)
        self._keep_line(text, line_no, lines, i, base)

    def _judge(self, text: str) -> int | None:
        """Index of the filter rule that drops this line, or None (never drop an error)."""
        idx = self.filters.first(text)
        if idx is None or self.diag.any(text):
            return None
        return idx

    def _remember_drop(self, shape: bytes, idx: int, text: str, line_no: int) -> None:
        rule = self.ruleset.filters[idx]
        self._drop[shape] = idx
        if rule.spec.extract:
            self._extract[shape] = idx
            self._extract_point(rule, text, line_no)
        if rule.spec.progress:
            self._progress_shapes.add(shape)
            self._last_progress = (line_no, text.encode())

    def _drop_segment(self, seg: str, line_no: int) -> bool:
        shape = seg.translate(DIGIT_MASK_STR)
        idx = self._str_drop.get(shape)
        if idx is None:
            idx = self._judge(seg)
            if idx is None:
                return False
            if len(self._str_drop) < MAX_SHAPE_CACHE:
                self._str_drop[shape] = idx
            rule = self.ruleset.filters[idx]
            if rule.spec.extract:
                self._extract_point(rule, seg, line_no)
        rule = self.ruleset.filters[idx]
        if rule.spec.progress:
            self._last_progress = (line_no, seg.encode())
        self._str_dropped[idx] += 1
        return True

    def _keep_line(self, text: str, line_no: int, lines: list[bytes], i: int, base: int) -> None:
        rank = extract_rank(text)
        host = extract_host(text)
        if rank is not None:
            self._known_ranks.add(rank)
        if host is not None:
            self._known_hosts.add(host)
        hits = self.diag.hits(text)
        flagged = bool(hits)
        if hits:
            self._record(hits, text, line_no, rank, host)
        elif _CHAIN_RE.search(text):
            self._chain_pending.add(rank)
        elif _ERROR_HINT.search(text):
            flagged = True
            if len(self._flagged) < 200:
                self._flagged.append((line_no, text))
        if _BINARY_RE.search(text) and len(_BINARY_RE.findall(text)) * 4 > len(text):
            key = "<binary data>"
            text = "<binary data>"
        else:
            key = fold_key(text)
        tpl = self._templates.get(key)
        if tpl is None:
            if len(self._templates) >= MAX_TEMPLATES and not flagged:
                self.overflow_lines += 1
                return
            tpl = Template(text=text, first_line=line_no, last_line=line_no)
            self._templates[key] = tpl
        else:
            tpl.count += 1
            tpl.last_line = line_no
        tpl.flagged = tpl.flagged or flagged
        if rank is not None and len(tpl.ranks) < MAX_SET_MEMBERS:
            tpl.ranks.add(rank)
        if host is not None and len(tpl.hosts) < MAX_SET_MEMBERS:
            tpl.hosts.add(host)
        if flagged and tpl.count == 1:
            self._add_context(lines, i, base)

    def _record(self, hits: list[Hit[DiagnosisRule]], text: str, line_no: int,
                rank: int | None, host: str | None) -> None:
        best = max(hits, key=lambda h: h.rule.priority)
        groups = best.groups
        if "rank" in groups and groups["rank"].isdigit():
            rank = int(groups["rank"])
        host = groups.get("host") or host
        chained = False
        if rank in self._chain_pending and best.rule.spec.role.value == "cause":
            chained = True
            self._chain_pending.discard(rank)
        self.rule_counts[best.rule.id] += 1
        if self._occ_per_rule[best.rule.id] < MAX_OCCURRENCES_PER_RULE:
            self._occ_per_rule[best.rule.id] += 1
            self._occ.append(Occurrence(line_no, text, best.rule, groups, rank, host, chained))

    def _add_context(self, lines: list[bytes], i: int, base: int) -> None:
        if len(self._context) > 20_000:
            return
        for j in range(i - CONTEXT_BEFORE, i):
            if j >= 0:
                self._context.setdefault(base + j, _decode(lines[j][: self.line_cap]))
            elif -j <= len(self._tail):
                self._context.setdefault(base + j, _decode(self._tail[j][: self.line_cap]))
        for j in range(i + 1, min(i + 1 + CONTEXT_AFTER, len(lines))):
            self._context.setdefault(base + j, _decode(lines[j][: self.line_cap]))
        self._after = max(0, i + 1 + CONTEXT_AFTER - len(lines))

    def _owe_context(self, lines: list[bytes], base: int) -> None:
        for j in range(min(self._after, len(lines))):
            self._context.setdefault(base + j, _decode(lines[j][: self.line_cap]))
        self._after = 0

    # ---- metrics --------------------------------------------------------------------------
    def _extract_point(self, rule: FilterRule, text: str, line_no: int) -> None:
        try:
            m = rule.regex.search(text, timeout=MATCH_TIMEOUT_S)
        except TimeoutError:
            return
        if not m:
            return
        values = {}
        for name in ("loss", "grad_norm", "loss_scale", "lr", "throughput"):
            v = _float(m.groupdict().get(name))
            if v is not None:
                values[name] = v
        step_raw = m.groupdict().get("step")
        step = int(step_raw) if step_raw and step_raw.isdigit() else None
        point = MetricPoint(line_no, step, values, text[:500])
        if any(math.isnan(v) or math.isinf(v) for k, v in values.items() if k in ("loss", "grad_norm")):
            if len(self._nan) < 100:
                self._nan.append(point)
            return
        if values:
            self._metrics.append(point)

    def _sample_metrics(self, lines: list[bytes], shapes: list[bytes], base: int) -> None:
        extract = self._extract
        idx = list(compress(range(len(shapes)), map(extract.__contains__, shapes)))
        if not idx:
            return
        step = max(1, len(idx) // METRIC_SAMPLES_PER_CHUNK)
        picked = idx[::step]
        if picked[-1] != idx[-1]:
            picked.append(idx[-1])
        rules = self.ruleset.filters
        for i in picked:
            self._extract_point(rules[extract[shapes[i]]], _decode(lines[i]), base + i)

    # ---- result ---------------------------------------------------------------------------
    def finish(self, report: IngestReport) -> CompressedLog:
        dropped_by_rule: Counter = Counter()
        for shape, count in self._dropped_shapes.items():
            dropped_by_rule[self.ruleset.filters[self._drop[shape]].id] += count
        for idx, count in self._str_dropped.items():
            dropped_by_rule[self.ruleset.filters[idx].id] += count
        templates = sorted(self._templates.values(), key=lambda t: t.first_line)
        lines_dropped = sum(self._dropped_shapes.values())
        progress = None
        if self._last_progress:
            line_no, raw = self._last_progress
            ptext = _decode(raw)
            point = self._metrics[-1] if self._metrics and self._metrics[-1].line == line_no else None
            step = point.step if point else _step_of(self.ruleset, ptext)
            progress = Progress(step=step, line=line_no, time=extract_time(ptext), text=ptext[:500])
        warnings = list(report.warnings)
        if self.overflow_lines:
            warnings.append(f"{self.overflow_lines} non-error lines beyond {MAX_TEMPLATES} templates were not kept")
        stats = CompressionStats(
            bytes_in=self.bytes_in, bytes_out=0, lines_in=self.lines_in,
            lines_kept=sum(t.count for t in templates), lines_dropped=lines_dropped,
            templates=len(templates), encoding=report.encoding, dropped_by_rule=dict(dropped_by_rule.most_common()),
            warnings=warnings)
        log = CompressedLog(
            templates=templates, context=self._context, occurrences=self._occ,
            rule_counts=self.rule_counts, metrics=self._metrics, nan_points=self._nan,
            last_progress=progress, stats=stats, known_ranks=self._known_ranks,
            known_hosts=self._known_hosts, flagged_lines=self._flagged)
        out = render(log)
        stats.bytes_out = len(out.encode("utf-8"))
        stats.ratio = round(stats.bytes_in / stats.bytes_out, 1) if stats.bytes_out else 0.0
        stats.lines_cut = self.lines_cut + report.lines_cut
        log._rendered = out  # type: ignore[attr-defined]
        return log


def _step_of(ruleset: RuleSet, text: str) -> int | None:
    for rule in ruleset.filters:
        if rule.spec.progress and "step" in rule.regex.groupindex:
            m = rule.regex.search(text)
            if m and m.group("step") and m.group("step").isdigit():
                return int(m.group("step"))
    return None


def _fmt_set(values: Iterable, limit: int = 8) -> str:
    vals = sorted(values)
    if len(vals) <= limit:
        return ",".join(map(str, vals))
    return ",".join(map(str, vals[:limit])) + f",…(+{len(vals) - limit})"


def render(log: CompressedLog) -> str:
    """The compact text for humans and LLMs: templates in order, errors verbatim with context."""
    cached = getattr(log, "_rendered", None)
    if cached is not None:
        return cached
    out: list[str] = []
    s = log.stats
    out.append(f"# logdx compressed log: {s.lines_in} lines in, {s.lines_kept} kept in {s.templates} templates, "
               f"{s.lines_dropped} dropped")
    for rid, count in list(s.dropped_by_rule.items())[:12]:
        out.append(f"#   dropped {count} × {rid}")
    if log.last_progress:
        out.append(f"# last progress: line {log.last_progress.line} step {log.last_progress.step}")
    for w in s.warnings:
        out.append(f"# warning: {w}")
    entries: list[tuple[int, str]] = []
    template_lines = {t.first_line for t in log.templates}
    for t in log.templates:
        where = f"L{t.first_line}" if t.count == 1 else f"L{t.first_line}-{t.last_line} ×{t.count}"
        tags = ""
        if t.count > 1 and len(t.ranks) > 1:
            tags += f" ranks[{_fmt_set(t.ranks)}]"
        if t.count > 1 and len(t.hosts) > 1:
            tags += f" hosts[{_fmt_set(t.hosts)}]"
        mark = "!" if t.flagged else " "
        entries.append((t.first_line, f"{mark}{where}{tags}: {t.text}"))
    for line_no, text in log.context.items():
        if line_no not in template_lines:
            entries.append((line_no, f"~L{line_no}: {text}"))
    entries.sort(key=lambda e: e[0])
    out.extend(e[1] for e in entries)
    return "\n".join(out) + "\n"


def compress_source(source: str | Path | BinaryIO, ruleset: RuleSet, *,
                    chunk_size: int = CHUNK_SIZE,
                    on_progress: Callable[[int], None] | None = None) -> CompressedLog:
    report = IngestReport()
    comp = Compressor(ruleset)
    for chunk in iter_chunks(source, report, chunk_size=chunk_size):
        comp.feed(chunk)
        if on_progress:
            on_progress(len(chunk))
    return comp.finish(report)
