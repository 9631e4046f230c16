"""The compressed log: folded templates, error occurrences, metric series and statistics.

Plain data shared by the compressor, the byte-range merge and the diagnosis stages; `render`
turns it into the compact text humans and LLMs read.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from app.core import signals
from app.core.binary import BINARY_RULE_ID, BINARY_SHARE
from app.core.fields import DIGITS, extract_time
from app.core.placement import RankHosts
from app.core.ingest import IngestReport
from app.core.rules import DiagnosisRule, RuleSet
from app.core.types import CompressionStats, Progress

MAX_TEMPLATES = 50_000
MAX_SET_MEMBERS = 512
MAX_METRIC_POINTS = 4096  # per log: memory stays flat in log size (see thin_metrics)
KEEP_RECENT_POINTS = 64  # the newest points are never thinned
MAX_FLAGGED = 200
BINARY_TEXT = "<binary data>"  # the template of lines that are mostly control bytes
RECENT_PROGRESS = 4  # progress markers remembered: the last one, and whether training went on


def decode_line(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace")
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    return text


@dataclass(slots=True)  # (thousands of these cross the process boundary: no __dict__ each)
class Template:
    """One folded line shape, in order of first appearance."""

    text: str
    first_line: int
    last_line: int
    count: int = 1
    ranks: set[int] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    flagged: bool = False  # an error rule or the error heuristic fired on it
    last_text: str | None = None  # text of the line at last_line when it differs from the first

    @property
    def last_line_text(self) -> str:
        return self.last_text if self.last_text is not None else self.text


TemplateRow = tuple  # (key, text, first_line, last_line, count, ranks, hosts, flagged, last_text)


def _template_row(key: str, t: Template) -> TemplateRow:
    return key, t.text, t.first_line, t.last_line, t.count, tuple(t.ranks), tuple(t.hosts), t.flagged, t.last_text


def _row_template(row: TemplateRow) -> Template:
    _, text, first_line, last_line, count, ranks, hosts, flagged, last_text = row
    return Template(text=text, first_line=first_line, last_line=last_line, count=count, ranks=set(ranks),
                    hosts=set(hosts), flagged=flagged, last_text=last_text)


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


@dataclass(slots=True)
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
    recent_progress: list[Progress]  # the last few progress markers (last_progress is the last)
    stats: CompressionStats
    known_ranks: set[int]
    known_hosts: set[str]
    flagged_lines: list[tuple[int, str]]  # error-looking lines no rule explained (first ones)
    # the last recent progress marker that says training finished (a `completion` filter rule)
    completed: Progress | None = None
    rendered: str | None = None  # the compact text, rendered once the stats are final
    rank_hosts: dict[int, str] = field(default_factory=dict)  # global rank -> host (NCCL init lines)
    cut_short: bool = False  # reading stopped early (a limit, a damaged archive): the end of the log was not seen
    # shapes of kept lines that carry a training signal in a layout no filter rule knows (shape ->
    # ShapeSignal.as_row(), app/core/signals.py): the onset re-read reads their lines again
    signal_shapes: dict[bytes, tuple] = field(default_factory=dict)
    # the last progress marker is a format-free one (a kept line of a signal shape), not a filter
    # rule's: rank.py asks more of it before reading a hang from it
    inferred_progress: bool = False

    @property
    def text(self) -> str:
        return self.rendered if self.rendered is not None else render(self)


@dataclass
class Partial:
    """The findings of one compressor over a contiguous range of lines."""

    templates: dict[str, Template]
    context: dict[int, str]
    occurrences: list[Occurrence]
    rule_counts: Counter
    metrics: list[MetricPoint]
    nan_points: list[MetricPoint]
    progress: list[tuple[int, str]]  # the last few progress markers: (line, text)
    flagged: list[tuple[int, str]]
    known_ranks: set[int]
    known_hosts: set[str]
    dropped_by_rule: Counter
    lines_dropped: int
    lines_in: int
    lines_kept: int  # lines in templates; lines_in == lines_kept + lines_dropped + overflow_lines
    bytes_in: int
    lines_cut: int
    overflow_lines: int
    binary_bytes: int = 0  # bytes of chunks judged binary (app/core/binary.py)
    binary_chunks: int = 0
    rank_hosts: RankHosts = field(default_factory=RankHosts)
    signal_shapes: dict[bytes, tuple] = field(default_factory=dict)  # see CompressedLog

    # A range worker's findings travel to the parent pickled, with the templates as rows of plain
    # values (TemplateRow): thousands of Template objects cost tens of ms to pickle and unpickle,
    # rows a few. The parent merges rows as they are (merge_partials) and builds Template objects
    # only for keys it has not seen; `templates` is rebuilt from the rows on first access. The
    # metric points travel as rows too (a slotted object pickles through copyreg, ~3 µs each; a
    # worker sends ~2,000): rebuilt when the findings are read.
    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        rows = state.pop("templates", None)
        if rows is not None:
            state["_rows"] = [_template_row(key, t) for key, t in rows.items()]
        for name in ("metrics", "nan_points"):
            state[name] = [(p.line, p.step, p.values, p.text) for p in state[name]]
        return state

    def __setstate__(self, state: dict) -> None:
        for name in ("metrics", "nan_points"):
            state[name] = [MetricPoint(*row) for row in state[name]]
        self.__dict__.update(state)

    def __getattr__(self, name: str):
        rows = self.__dict__.get("_rows")
        if name != "templates" or rows is None:
            raise AttributeError(name)
        self.templates = {row[0]: _row_template(row) for row in self.template_rows()}
        del self.__dict__["_rows"]
        self.__dict__.pop("_rows_offset", None)
        return self.templates

    def template_rows(self) -> Iterable[TemplateRow]:
        """The templates as rows (key, text, first_line, last_line, count, ranks, hosts, flagged,
        last_text), line numbers shifted like the rest of the findings."""
        rows = self.__dict__.get("_rows")
        if rows is None:
            return (_template_row(key, t) for key, t in self.templates.items())
        offset = self.__dict__.get("_rows_offset", 0)
        if not offset:
            return rows
        return ((r[0], r[1], r[2] + offset, r[3] + offset, *r[4:]) for r in rows)

    def shifted(self, offset: int) -> Partial:
        """The same findings with every line number moved by `offset` (for a later byte range)."""
        if not offset:
            return self
        if "_rows" in self.__dict__:  # (applied as the rows are read)
            self._rows_offset = self.__dict__.get("_rows_offset", 0) + offset
        else:
            for t in self.templates.values():
                t.first_line += offset
                t.last_line += offset
        for o in self.occurrences:
            o.line += offset
        for p in (*self.metrics, *self.nan_points):
            p.line += offset
        self.context = {k + offset: v for k, v in self.context.items()}
        self.flagged = [(ln + offset, t) for ln, t in self.flagged]
        self.progress = [(line + offset, text) for line, text in self.progress]
        return self


def _loss(point: MetricPoint) -> float:
    return point.values.get("loss", -math.inf)


def thin_metrics(points: list[MetricPoint]) -> list[MetricPoint]:
    """The series at about half its length, in line order: of each pair of neighbouring points
    the one with the higher loss stays (a loss spike survives thinning); the newest
    KEEP_RECENT_POINTS are kept as they are. Applied whenever a series passes MAX_METRIC_POINTS,
    so a 20 GB log holds no more points than a 2 GB one."""
    old, recent = points[:-KEEP_RECENT_POINTS], points[-KEEP_RECENT_POINTS:]
    out = [b if _loss(b) > _loss(a) else a for a, b in zip(old[0::2], old[1::2])]
    if len(old) % 2:
        out.append(old[-1])
    return out + recent


def merge_partials(parts: list[Partial]) -> Partial:
    """Combine the partials of consecutive ranges, in order, into one."""
    offset = 0
    shifted = []
    for part in parts:
        lines = part.lines_in
        shifted.append(part.shifted(offset))
        offset += lines
    head = shifted[0]
    templates = head.templates
    for part in shifted[1:]:
        for row in part.template_rows():
            key, text, first_line, last_line, count, ranks, hosts, flagged, last_text = row
            mine = templates.get(key)
            if mine is None:
                if len(templates) < MAX_TEMPLATES or flagged:
                    templates[key] = _row_template(row)
                else:  # (a template of \r segments may count more than its lines: clamp)
                    moved = min(count, part.lines_kept)
                    part.lines_kept -= moved
                    head.overflow_lines += moved
                continue
            mine.count += count
            if last_line > mine.last_line:
                mine.last_line, mine.last_text = last_line, text if last_text is None else last_text
            if flagged:
                mine.flagged = True
            _add_capped(mine.ranks, ranks)
            _add_capped(mine.hosts, hosts)
        head.context.update(part.context)
        head.occurrences.extend(part.occurrences)
        head.rule_counts.update(part.rule_counts)
        head.metrics.extend(part.metrics)
        while len(head.metrics) > MAX_METRIC_POINTS:
            head.metrics = thin_metrics(head.metrics)
        head.nan_points.extend(part.nan_points)
        head.progress = (head.progress + part.progress)[-RECENT_PROGRESS:]
        head.flagged.extend(part.flagged[: max(0, MAX_FLAGGED - len(head.flagged))])
        head.known_ranks |= part.known_ranks
        head.known_hosts |= part.known_hosts
        head.dropped_by_rule.update(part.dropped_by_rule)
        head.lines_dropped += part.lines_dropped
        head.lines_in += part.lines_in
        head.lines_kept += part.lines_kept
        head.bytes_in += part.bytes_in
        head.lines_cut += part.lines_cut
        head.overflow_lines += part.overflow_lines
        head.binary_bytes += part.binary_bytes
        head.binary_chunks += part.binary_chunks
        head.rank_hosts.merge(part.rank_hosts)
        for shape, row in part.signal_shapes.items():
            head.signal_shapes.setdefault(shape, row)
    return head


def _add_capped(mine: set, more: tuple) -> None:
    """Add a row's members to a template's rank/host set, up to MAX_SET_MEMBERS."""
    room = MAX_SET_MEMBERS - len(mine)
    if len(more) <= room:  # (the common case: no cap to apply, no copy)
        mine.update(more)
    elif room > 0:
        mine.update(more[:room])


def build_log(part: Partial, ruleset: RuleSet, report: IngestReport) -> CompressedLog:
    part.metrics.sort(key=lambda p: p.line)
    part.nan_points.sort(key=lambda p: p.line)
    templates = sorted(part.templates.values(), key=lambda t: t.first_line)
    steps = {p.line: p.step for p in part.metrics[-4 * RECENT_PROGRESS:]}
    recent = [Progress(step=steps.get(line_no) or _step_of(ruleset, ptext, part.signal_shapes), line=line_no,
                       time=extract_time(ptext), text=ptext[:500]) for line_no, ptext in part.progress]
    warnings = list(report.warnings)
    if part.binary_bytes:
        skipped = part.dropped_by_rule.get(BINARY_RULE_ID, 0)
        warnings.append(f"{part.binary_bytes} bytes in {part.binary_chunks} chunk(s) look like binary data "
                        f"(over {BINARY_SHARE:.0%} control bytes or invalid UTF-8): {skipped} non-text lines "
                        "in them were skipped, their text lines were read")
    if part.overflow_lines:
        warnings.append(f"{part.overflow_lines} non-error lines beyond {MAX_TEMPLATES} templates were not kept")
    stats = CompressionStats(
        bytes_in=part.bytes_in, bytes_out=0, lines_in=part.lines_in,
        lines_kept=part.lines_kept, lines_dropped=part.lines_dropped,
        templates=len(templates), lines_cut=part.lines_cut + report.lines_cut, encoding=report.encoding,
        dropped_by_rule=dict(part.dropped_by_rule.most_common()), warnings=warnings)
    log = CompressedLog(
        templates=templates, context=part.context, occurrences=part.occurrences,
        rule_counts=part.rule_counts, metrics=part.metrics, nan_points=part.nan_points,
        last_progress=recent[-1] if recent else None, recent_progress=recent, stats=stats, known_ranks=part.known_ranks,
        known_hosts=part.known_hosts, flagged_lines=part.flagged[:MAX_FLAGGED], rank_hosts=part.rank_hosts.mapping(),
        cut_short=report.cut_short, signal_shapes=part.signal_shapes,
        inferred_progress=bool(part.progress) and _signal_shape(part.progress[-1][1]) in part.signal_shapes,
        completed=next((p for p in reversed(recent) if _is_completion(ruleset, p.text or "")), None))
    body = render_body(log)
    out = render(log, body)
    stats.bytes_out = len(out.encode("utf-8"))
    stats.ratio = round(stats.bytes_in / stats.bytes_out, 1) if stats.bytes_out else 0.0
    log.rendered = render(log, body)  # again: the header now carries the final byte counts
    return log


def _step_of(ruleset: RuleSet, text: str, signal_shapes: dict[bytes, tuple]) -> int | None:
    for rule in ruleset.filters:
        if rule.spec.progress and "step" in rule.regex.groupindex:
            m = rule.regex.search(text)
            if m and m.group("step") and m.group("step").isdigit():
                return int(m.group("step"))
    if not signals.enabled():
        return None
    # a progress line of a layout no filter rule knows, read as its shape was (a table row under
    # its header): app/core/signals.py
    row = signal_shapes.get(_signal_shape(text))
    if row is not None:
        reading = signals.ShapeSignal.from_row(row).read(text)
        return reading.step if reading is not None else None
    return signals.step_of(text)


def _signal_shape(text: str) -> bytes:
    return text.encode("utf-8", "replace").translate(None, DIGITS)


def _is_completion(ruleset: RuleSet, text: str) -> bool:
    return any(rule.spec.completion and rule.regex.search(text) for rule in ruleset.filters)



def _fmt_set(values: Iterable, limit: int = 8) -> str:
    vals = sorted(values)
    if len(vals) <= limit:
        return ",".join(map(str, vals))
    return ",".join(map(str, vals[:limit])) + f",…(+{len(vals) - limit})"


def render(log: CompressedLog, body: str | None = None) -> str:
    """The compact text for humans and LLMs: templates in order, errors verbatim with context.
    `body`: the text below the header, when already rendered (it does not depend on the stats)."""
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
    return "\n".join(out) + "\n" + (render_body(log) if body is None else body)


def render_body(log: CompressedLog) -> str:
    entries: list[tuple[int, str]] = []
    template_lines = {t.first_line for t in log.templates}
    host_tags: dict[frozenset, str] = {}  # (many templates come from the same hosts)
    for t in log.templates:
        mark = "!" if t.flagged else " "
        if t.count == 1:
            entries.append((t.first_line, f"{mark}L{t.first_line}: {t.text}"))
            continue
        tags = f" ranks[{_fmt_set(t.ranks)}]" if len(t.ranks) > 1 else ""
        if len(t.hosts) > 1:
            key = frozenset(t.hosts)
            tag = host_tags.get(key)
            if tag is None:
                tag = host_tags[key] = f" hosts[{_fmt_set(key)}]"
            tags += tag
        entries.append((t.first_line, f"{mark}L{t.first_line}-{t.last_line} ×{t.count}{tags}: {t.text}"))
    for line_no, text in log.context.items():
        if line_no not in template_lines:
            entries.append((line_no, f"~L{line_no}: {text}"))
    entries.sort(key=_entry_line)
    return "".join([e[1] + "\n" for e in entries])


def _entry_line(entry: tuple[int, str]) -> int:
    return entry[0]




SERIES_POINTS = 400  # buckets a chart needs; the full series stays in the pipeline
_SHAPE_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|\b(?:nan|NaN|NAN|inf|Inf|INF)\b")


def metric_format(text: str) -> str:
    """A short id of a metric line's layout (its text with the numbers masked): one log may print
    two formats whose `throughput` are different units; a chart keeps them apart."""
    import hashlib

    shape = " ".join(_SHAPE_NUMBER.sub("#", text).split())  # padding of the numbers is no format
    return hashlib.sha1(shape.encode("utf-8", "replace")).hexdigest()[:8]


def series_points(log: CompressedLog, limit: int = SERIES_POINTS) -> list[dict]:
    """The metric series as plain data for charts: past `limit` points, the series is cut into
    `limit` buckets and of each bucket the first, last, lowest and highest point of every metric
    are kept (a spike or a dip in the stored series is never sampled away). NaN/inf points are
    all kept and marked, with their value names. Each point names its line format (`fmt`)."""
    points = log.metrics
    if len(points) > limit:
        size = len(points) / limit
        keep: set[int] = set()
        for b in range(limit):
            lo, hi = int(b * size), min(len(points), int((b + 1) * size))
            if lo >= hi:
                continue
            keep.update((lo, hi - 1))
            names = {k for p in points[lo:hi] for k in p.values}
            for name in names:
                have = [i for i in range(lo, hi) if name in points[i].values and math.isfinite(points[i].values[name])]
                if have:
                    keep.add(min(have, key=lambda i: points[i].values[name]))
                    keep.add(max(have, key=lambda i: points[i].values[name]))
        points = [points[i] for i in sorted(keep)]
    out = [{"line": p.line, "step": p.step, "fmt": metric_format(p.text) if p.text else "",
            "values": {k: v for k, v in p.values.items() if math.isfinite(v)}} for p in points]
    out += [{"line": p.line, "step": p.step, "values": {}, "nan": sorted(p.values)} for p in log.nan_points[:50]]
    out.sort(key=lambda p: p["line"])
    return out


def mostly_unfiltered(log: CompressedLog, *, min_lines: int = 1000, min_share: float = 0.1) -> bool:
    """Did many lines survive the filters (a metric format no filter rule knows)? The cheap test
    before the log agent proposes filter rules."""
    stats = log.stats
    return stats.lines_kept >= min_lines and stats.lines_kept >= min_share * max(1, stats.lines_in)
