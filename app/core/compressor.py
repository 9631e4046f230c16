"""Compressor: drop metric/progress/chatter lines, fold repeats, keep every error with context.

The hot path never runs a regex on most lines. A line's *shape* is the line with its digits
deleted; shapes already judged droppable are looked up per line, either by the optional C scan
loop (`app/core/_shapescan.c`: a hash set walked without creating Python objects) or, as a
fallback, by C-level iterators over `bytes.translate`/`split` (`map`, `itertools.compress`,
`Counter`). Only lines with a shape never seen before, or shapes that survive, reach Python code
and the rules. A new shape is dropped only when a filter rule matches it AND no diagnosis rule
does: an error line is never dropped. Plain surviving lines of a known shape are counted per shape
as well (`app/core/keptshapes.py`); only a line with a rank/host not seen for its shape comes back.
"""

from __future__ import annotations

from collections import Counter
from itertools import compress
from operator import not_

import re2

from app.core import regexcache, signals
from app.core.binary import BINARY_SHARE, BINARY_RULE_ID, is_text_line, nontext_share
from app.core.compressed import (
    BINARY_TEXT, MAX_FLAGGED, MAX_SET_MEMBERS, MAX_TEMPLATES, RECENT_PROGRESS, CompressedLog, MetricPoint, Occurrence,
    Partial, Template,
    build_log, decode_line,
)
from app.core.fields import (
    DIGITS, PLACEHOLDER_HOSTS, SHAPE_DELETE_STR, extract_rank, fold_key, host_match, is_prefix_only, rank_match,
)
from app.core.ingest import CUT_MARK, LINE_CAP, IngestReport
from app.core.chunkview import ChunkView
from app.core.keptshapes import DigitSensitivity, field_values
from app.core.keptslots import KeptSlots
from app.core.metricsample import METRIC_SAMPLES_PER_CHUNK, MetricSampler
from app.core.matcher import Hit
from app.core.placement import RankHosts
from app.core.rules import DiagnosisRule, RuleSet
from app.core.signals import ShapeSignal, SignalReader

try:  # the optional C scan loop (setup.py builds it; pure Python is the fallback)
    from app.core._shapescan import ShapeTable
except ImportError:  # pragma: no cover - depends on the build
    ShapeTable = None

CONTEXT_BEFORE = 2
CONTEXT_AFTER = 2
MAX_SHAPE_CACHE = 200_000
MAX_OCCURRENCES_PER_RULE = 2_000
CUT_SLACK = 64
TAIL_BYTES = 64 * 1024  # split this much of a pure-metric chunk's end
SCAN_BATCH = 64  # the C loop hands back at most this many lines before new shapes are learned

# RE2 (a DFA: ~2 us a line where `regex` takes ~25 us on this alternation); its \b is ASCII-only,
# which only matters for a hint next to non-ASCII letters. A one-pattern set: only whether it
# matches counts, and a set's match skips the wrapper's span bookkeeping (~0.4 us, not ~1.4)
_ERROR_HINT_PATTERN = (
    r"Traceback \(most recent call last\)|Error\b|Exception\b|\berror\b|\bERROR\b|\bFATAL\b|\bfatal\b|"
    r"\bfailed\b|\bFAILED\b|\bKilled\b|\bkilled\b|\bWARN\b|[Ss]egmentation fault|core dumped|\babort|"
    r"timed out|[Tt]imeout|\bnan\b|\bNaN\b|\binf\b|CANCELLED|[Pp]anic|Errno|"
    r"\b(?:lost|dead|died|unreachable|refused|preempted|unusable|halted|NotReady|evicted)\b|"
    # (an exception class of a library's errors / exceptions module whose name says neither:
    # `triton.runtime.errors.OutOfResources: out of resource: shared memory ...`)
    r"\b(?:errors|exceptions)\.[A-Z][a-z]\w*(?::|\s*$)")
_ERROR_HINT = re2.Set.SearchSet(re2.Options())
_ERROR_HINT.Add(_ERROR_HINT_PATTERN)
_ERROR_HINT.Compile()
_CHAIN_RE = regexcache.compile(
    r"During handling of the above exception, another exception occurred|"
    r"The above exception was the direct cause of the following exception")
_BINARY_RE = regexcache.compile(r"[\x00-\x08\x0e-\x1f\ufffd]")


class Compressor:
    """Streaming compressor; feed chunks with `feed`, then call `finish`."""

    def __init__(self, ruleset: RuleSet, *, line_cap: int = LINE_CAP, use_c: bool = True) -> None:
        self.ruleset = ruleset
        self.filters, self.diag = ruleset.matchers()
        self.line_cap = line_cap
        self._drop: dict[bytes, int] = {}  # shape -> filter rule index
        self._keep: set[bytes] = set()  # shapes judged not droppable
        self._str_drop: dict[str, int] = {}  # the same for \r segments (str shapes)
        self._extract: dict[bytes, int] = {}  # droppable shapes whose rule extracts metrics
        self._progress_shapes: set[bytes] = set()
        self._dropped_shapes: Counter = Counter()
        self._str_dropped: Counter = Counter()
        self._c_dropped: Counter = Counter()  # rule index -> drops counted in Python on the C path
        self._templates: dict[str, Template] = {}
        self._context: dict[int, str] = {}
        self._occ: list[Occurrence] = []
        self._occ_per_rule: Counter = Counter()
        self.rule_counts: Counter = Counter()
        self._progress: list[tuple[int, bytes]] = []  # the last RECENT_PROGRESS markers, in order
        self._flagged: list[tuple[int, str]] = []
        self._known_ranks: set[int] = set()
        self._known_hosts: set[str] = set()
        self._chain_pending: set[int | None] = set()
        self._tail: list[bytes] = []  # last lines of the previous chunk (context before)
        self._after = 0  # context lines still owed after the last error
        # the C scan loop when it is built (see app/core/_shapescan.c); same results either way
        self._table = ShapeTable(max(1, len(ruleset.filters)), MAX_SET_MEMBERS) if (use_c and ShapeTable is not None) else None
        self._sample_every = 1
        self._metrics = MetricSampler(self._note_rank)
        # format-free training signals (app/core/signals.py): every shape's first line is read for
        # a loss-like value or a step counter; kept shapes that carry one, and their signal
        self._signals = SignalReader() if signals.enabled() else None
        self._sig: dict[bytes, ShapeSignal] = {}
        self._chunk_sig: list[tuple[int, ShapeSignal]] = []  # C path: (index, signal) of survivors
        digit_sensitive = ruleset.derived("digit_sensitivity", lambda: DigitSensitivity(ruleset.diagnosis))
        self._slots = KeptSlots(self._table, digit_sensitive, line_cap, MAX_SHAPE_CACHE,
                                self._known_ranks, self._known_hosts)
        self.lines_in = 0  # lines are LF-separated; the \r segments of a line are parts of it
        self.lines_kept = 0
        self.bytes_in = 0
        self.lines_cut = 0
        self.overflow_lines = 0
        self.binary_bytes = 0  # bytes of chunks judged binary
        self.binary_chunks = 0
        self.binary_lines = 0  # non-text lines skipped in them
        self.rank_hosts = RankHosts()  # global rank -> host from NCCL init lines (dropped as chatter)

    # ---- hot path -------------------------------------------------------------------------
    def feed(self, chunk: bytes) -> None:
        if self._binary_chunk(chunk, len(chunk)):
            return
        self.bytes_in += len(chunk)
        self.rank_hosts.scan(chunk, len(chunk))
        if self._table is not None:
            self._feed_c(chunk)
            return
        shapes = chunk.translate(None, DIGITS).split(b"\n")
        if not shapes[-1]:
            shapes.pop()
        n = len(shapes)
        base = self.lines_in + 1  # 1-based line number of the chunk's first line
        self.lines_in += n
        self._metrics.new_chunk()
        drop = self._drop
        dropped = list(map(drop.__contains__, shapes))
        self._dropped_shapes.update(compress(shapes, dropped))
        survivors = list(compress(range(n), map(not_, dropped)))
        # The original lines are split only when a line survives or context is owed; a chunk of
        # pure metrics only splits its tail (for metric samples, progress and context).
        if survivors or self._after:
            lines = chunk.split(b"\n")[:n]
            first = 0
        else:
            cut = chunk.rfind(b"\n", 0, max(0, len(chunk) - TAIL_BYTES - 1))
            lines = chunk[cut + 1:].split(b"\n")
            if chunk.endswith(b"\n"):
                lines.pop()
            first = n - len(lines)
        if self._after:
            self._owe_context(lines, base)
        for i in survivors:
            self._survivor(lines, shapes, i, base)
        if self._extract:
            self._metrics.sample(lines, shapes, base, first, self._extract, self.ruleset.filters)
        if self._progress_shapes:
            found = 0
            for i in range(n - 1, first - 1, -1):
                if shapes[i] in self._progress_shapes:
                    self._note_progress(base + i, lines[i - first])
                    found += 1
                    if found == RECENT_PROGRESS:
                        break
        self._tail = lines[-CONTEXT_BEFORE:]

    def feed_buffer(self, buf: bytearray, length: int) -> None:
        """Feed the first `length` bytes of a reused buffer (C scan loop only; no copy of the
        chunk is made, and nothing keeps a reference to `buf` after the call)."""
        if self._table is None:
            self.feed(bytes(buf[:length]))
            return
        if self._binary_chunk(buf, length):
            return
        self.bytes_in += length
        self.rank_hosts.scan(buf, length)
        self._feed_c(buf, length)

    def _binary_chunk(self, buf: bytes | bytearray, length: int) -> bool:
        """Handle a chunk that is mostly binary (see app/core/binary.py): only its clean text
        lines are read; the others count as dropped under BINARY_RULE_ID. False for text."""
        share = nontext_share(buf, length)
        if share < BINARY_SHARE:
            return False
        data = bytes(buf[:length])
        lines = data.split(b"\n")
        if data.endswith(b"\n"):
            lines.pop()
        base = self.lines_in + 1
        self.lines_in += len(lines)
        self.bytes_in += length
        self._metrics.new_chunk()
        self._after = 0  # no context lines from binary junk
        skipped = 0
        for i, line in enumerate(lines):
            if not is_text_line(line):
                skipped += 1
                continue
            shape = line.translate(None, DIGITS)
            if shape in self._drop:
                self._dropped_shapes[shape] += 1
                continue
            self._survivor(lines, None, i, base, raw=line)
        self.binary_lines += skipped
        self.binary_bytes += length
        self.binary_chunks += 1
        self._tail = [line for line in lines[-CONTEXT_BEFORE:] if is_text_line(line)]
        return True

    def _feed_c(self, chunk: bytes | bytearray, length: int | None = None) -> None:
        """The same as the pure-Python path, with the per-line loop in C (`ShapeTable.scan`)."""
        table = self._table
        length = len(chunk) if length is None else length
        with memoryview(chunk) as whole, whole[:length] as mv:
            self._scan_chunk(table, chunk, mv, length)

    def _scan_chunk(self, table, chunk: bytes | bytearray, mv: memoryview, length: int) -> None:
        base = self.lines_in + 1
        self._metrics.new_chunk()
        spans: dict[int, tuple[int, int]] = {}
        view = ChunkView(chunk, None, spans, length)
        if self._after:
            self._owe_context(view, base)
        rules = self.ruleset.filters
        slots = self._slots
        late: list[tuple[int, bytes, int]] = []  # metric lines of shapes first judged in this chunk
        samples: list[tuple[int, int, int]] = []
        progress: list[tuple[int, int, int]] = []  # candidates for the chunk's last progress lines
        idx = start = n_extract = 0
        self._chunk_sig.clear()
        while True:
            # in batches: shapes judged in one batch are dropped/counted by C in the next
            idx, start, survivors, samp, prog, n_extract = table.scan_from(
                mv, start, idx, base, self._sample_every, n_extract, SCAN_BATCH)
            samples += samp
            progress += prog
            for i, a, b in survivors:  # lines whose shape was unknown when scanned
                spans[i] = (a, b)
                raw = bytes(mv[a:b])
                if table.has(raw):  # judged droppable since (earlier in this batch)
                    idx_rule = self._c_rule_of(raw)
                    self._c_dropped[idx_rule] += 1
                    spec = rules[idx_rule].spec
                    if spec.progress:
                        progress.append((i, a, b))
                    if spec.extract:
                        late.append((i, raw, idx_rule))
                    continue
                if slots.slot_of and table.probe_keep(raw, base + i) == 0:  # kept since; counted by C
                    shape = raw.translate(None, DIGITS)
                    slots.note_last_counted(slots.slot_of[shape], base + i, raw)
                    if self._sig and (sig := self._sig.get(shape)) is not None and not sig.nonfinite:
                        self._chunk_sig.append((i, sig))
                    continue
                self._survivor(view, None, i, base, raw=raw)
            if start >= length:
                break
        for i, sig in self._chunk_sig:  # kept lines of a signal shape that Python saw in this chunk
            a, b = spans[i]
            if sig.progress:
                progress.append((i, a, b))
            if sig.extract:
                late.append((i, bytes(mv[a:b]), sig))
        n = idx
        self.lines_in += n
        view._count = n
        table.save_touched(mv)  # each kept slot's last line of this buffer, copied in C
        points = [(i, (a, b), None) for i, a, b in samples] + late
        if len(points) > 2 * METRIC_SAMPLES_PER_CHUNK:  # the C stride is a guess from the last chunk
            points.sort(key=lambda p: p[0])
            points = points[:: len(points) // METRIC_SAMPLES_PER_CHUNK] + points[-1:]
        for i, raw, idx_rule in points:
            if idx_rule is None:
                raw = bytes(mv[raw[0]:raw[1]])
                if self._sig:  # a sample of a kept signal shape (flagged in C by mark_keep)?
                    idx_rule = self._sig.get(raw.translate(None, DIGITS))
            if isinstance(idx_rule, ShapeSignal):
                self._metrics.extract_signal(idx_rule, decode_line(raw), base + i)
                continue
            rule = rules[self._c_rule_of(raw) if idx_rule is None else idx_rule]
            self._metrics.extract(rule, decode_line(raw), base + i)
        for i, a, b in sorted(progress)[-RECENT_PROGRESS:]:
            self._note_progress(base + i, bytes(mv[a:b]))
        self._sample_every = max(1, -(-(n_extract + len(late)) // METRIC_SAMPLES_PER_CHUNK))
        self._tail = [view[j] for j in range(max(0, n - CONTEXT_BEFORE), n)]

    def _note_rank(self, text: str) -> None:
        """Ranks seen on dropped (metric/progress) lines count as existing: a rank that only
        prints progress is the silent one when the others time out in a collective."""
        rank = extract_rank(text)
        if rank is not None:
            self._known_ranks.add(rank)

    def _note_progress(self, line_no: int, raw: bytes) -> None:
        """Keep the last RECENT_PROGRESS progress markers in line order, one per line (of a
        \\r-rewritten bar, the last segment)."""
        self._note_rank(decode_line(raw[:200]))
        progress = [p for p in self._progress if p[0] != line_no]
        progress.append((line_no, raw))
        if len(progress) > 1 and progress[-2][0] > line_no:
            progress.sort(key=lambda p: p[0])
        self._progress = progress[-RECENT_PROGRESS:]

    def _c_rule_of(self, raw: bytes) -> int:
        """The filter rule index a droppable shape was judged with (cached per shape)."""
        shape = raw.translate(None, DIGITS)
        idx = self._drop.get(shape)
        if idx is None:
            idx = self.filters.first(decode_line(raw))
            # None only on a 64-bit hash collision of two shapes: count it under the first rule
            idx = 0 if idx is None else idx
            if len(self._drop) < MAX_SHAPE_CACHE:
                self._drop[shape] = idx
        return idx

    # ---- per surviving line ---------------------------------------------------------------
    def _survivor(self, lines, shapes: list[bytes] | None, i: int, base: int, *, raw: bytes | None = None) -> None:
        if shapes is None:  # C path: only surviving lines get a Python shape
            shape = raw.translate(None, DIGITS)
        else:
            raw, shape = lines[i], shapes[i]
            if shape in self._drop:  # judged earlier in this same chunk
                self._dropped_shapes[shape] += 1
                return
            slots = self._slots
            slot = slots.slot_of.get(shape)
            if slot is not None:
                if slots.count(slot, raw, base + i):
                    slots.variant(slot, *field_values(raw, slots.fields[slot]))
                return
        line_no = base + i
        if len(raw) > self.line_cap + CUT_SLACK:  # (ingest already cut lines spanning chunks)
            raw = raw[: self.line_cap] + CUT_MARK % self.line_cap
            self.lines_cut += 1
        text = decode_line(raw)
        if "\r" in text:
            # decoding neither adds nor removes \r: text and raw segments pair up
            segments = [(s, r) for s, r in zip(text.split("\r"), raw.split(b"\r")) if s.strip()]
            if segments and self._cr_line(segments, line_no, lines, i, base):
                return
        new_shape = False
        if shape not in self._keep and len(shape) <= self.line_cap:
            idx = self._judge(text)
            if idx is not None:
                self._remember_drop(shape, idx, text, line_no, raw)
                if self._table is not None:
                    self._c_dropped[idx] += 1
                else:
                    self._dropped_shapes[shape] += 1
                return
            if len(self._keep) < MAX_SHAPE_CACHE:
                self._keep.add(shape)
            new_shape = True
        kept = self._keep_line(text, line_no, lines, i, base)
        if new_shape and self._signals is not None:  # (an error or error-looking line is no step line)
            self._learn_signal(shape, text, kept[1] is None or (kept[0] is not None and kept[0].flagged))
        if kept[0] is not None:
            self.lines_kept += 1
        else:
            self.overflow_lines += 1
        if self._slots.undecided(shape):
            self._slots.learn(shape, raw, text, kept)
            if self._table is not None and (sig := self._sig.get(shape)) is not None and not sig.nonfinite:
                self._table.mark_keep(raw, sig.extract, sig.progress)
        if self._sig and (sig := self._sig.get(shape)) is not None:
            self._signal_line(sig, text, line_no, i, kept[1] is None)

    def _learn_signal(self, shape: bytes, text: str, diagnosed: bool) -> None:
        """The first line of a new kept shape: does it carry a training signal (a loss-like value,
        a step counter) in a layout no filter rule knows? Once per shape, never per line. A line
        that is evidence of an error (a bar with a watchdog timeout glued to it) is no progress."""
        sig = self._signals.classify(text)
        if sig is None or len(self._sig) >= MAX_SHAPE_CACHE or (diagnosed and not sig.nonfinite):
            return
        self._sig[shape] = sig
        if self._table is None and not sig.nonfinite:  # the pure-Python loop reads them by shape
            if sig.progress:
                self._progress_shapes.add(shape)
            if sig.extract:
                self._extract[shape] = sig

    def _signal_line(self, sig: ShapeSignal, text: str, line_no: int, i: int, diagnosed: bool) -> None:
        """A kept line of a signal shape that reached Python: a non-finite value becomes a NaN
        point (unless a diagnosis rule already made it evidence); on the C path, a progress or
        metric line is noted for the end of the chunk (the pure-Python loop finds them by shape)."""
        if sig.nonfinite:
            if not diagnosed:
                self._nonfinite_point(sig.read(text), text, line_no)
        elif self._table is not None:
            self._chunk_sig.append((i, sig))

    def _nonfinite_point(self, reading, text: str, line_no: int) -> None:
        if reading is None or not reading.nonfinite:
            return
        nan = self._metrics.nan
        if nan and nan[-1].line == line_no:  # (a filter rule's extraction read it already)
            return
        self._metrics.add(MetricPoint(line_no, reading.step, reading.values, text[:500]))

    def _cr_line(self, segments: list[tuple[str, bytes]], line_no: int, lines, i: int, base: int) -> bool:
        """A `\\r`-rewritten line (progress bar): its segments (text, raw) are judged one by one,
        but it is still one line. It counts as kept when any segment is kept, else as dropped
        (under the rule of its last segment), so lines_in == lines_kept + lines_dropped + overflow.
        A segment that is only a launcher prefix (`[rank0]:` before the bar's first \\r) has no
        content and is skipped; False when no segment has content (the caller judges the line
        whole). The C loop drops later such lines itself once every segment's shape is known."""
        content = []
        for seg, raw in segments:
            idx = self._drop_segment(seg, line_no, raw)
            if idx is None and is_prefix_only(seg):
                if self._table is not None and len(raw) <= self.line_cap:
                    self._table.add_prefix(raw)
                continue
            content.append((seg, raw, idx))
        if not content:
            return False
        kept = False
        last_rule = None
        last_progress = None  # one progress marker per line: the bar's last state
        for seg, raw, idx in content:
            if idx is None:
                kept = self._keep_line(seg, line_no, lines, i, base)[0] is not None or kept
            else:
                last_rule = idx
                if self.ruleset.filters[idx].spec.progress:
                    last_progress = raw
        if last_progress is not None:
            self._note_progress(line_no, last_progress)
        if kept:
            self.lines_kept += 1
        elif last_rule is not None:
            self._str_dropped[last_rule] += 1
        else:  # kept segments only, all past the template cap
            self.overflow_lines += 1
        return True

    def _judge(self, text: str) -> int | None:
        """Index of the filter rule that drops this line, or None (never drop an error)."""
        idx = self.filters.first(text)
        if idx is None or self.diag.any(text):
            return None
        return idx

    def _remember_drop(self, shape: bytes, idx: int, text: str, line_no: int, raw: bytes) -> None:
        rule = self.ruleset.filters[idx]
        self._drop[shape] = idx
        if self._table is not None:
            self._table.add(raw, idx, rule.spec.extract, rule.spec.progress)
        if rule.spec.extract:
            self._extract[shape] = idx
            self._metrics.extract(rule, text, line_no)
        if self._signals is not None:  # a nan/inf the rule does not read (a key it skips)
            self._nonfinite_point(signals.nonfinite_reading(text), text, line_no)
        if rule.spec.progress:
            self._progress_shapes.add(shape)
            self._note_progress(line_no, raw)

    def _drop_segment(self, seg: str, line_no: int, raw: bytes) -> int | None:
        """The filter rule index that drops this \r segment, or None (it is kept). A segment is
        judged like a line; a droppable one's shape also goes into the C table (lines whose
        segments are all known are then dropped there)."""
        shape = seg.translate(SHAPE_DELETE_STR)
        idx = self._str_drop.get(shape)
        if idx is None:
            idx = self._judge(seg)
            if idx is None:
                return None
            if len(self._str_drop) < MAX_SHAPE_CACHE:
                self._str_drop[shape] = idx
            rule = self.ruleset.filters[idx]
            if self._table is not None and len(raw) <= self.line_cap:
                self._table.add(raw, idx, rule.spec.extract, rule.spec.progress)
            if rule.spec.extract:
                self._metrics.extract(rule, seg, line_no)
            if self._signals is not None:
                self._nonfinite_point(signals.nonfinite_reading(seg), seg, line_no)
        return idx

    def _keep_line(self, text: str, line_no: int, lines: list[bytes], i: int, base: int):
        """Fold the line into its template. Returns (template, countable, rank match, host match):
        countable is None for an error or chain-marker line, else whether later lines of the shape
        may be counted without this path (no flagged-line list to fill, not binary)."""
        self.rank_hosts.note_kept_line(text)
        rank_m = rank_match(text)
        host_m = host_match(text)
        rank = int(rank_m.group(1)) if rank_m else None
        host = host_m.group(1) if host_m else None
        countable: bool | None = True
        if rank is not None:
            self._known_ranks.add(rank)
        if host is not None:
            self._known_hosts.add(host)
        hits = self.diag.hits(text)
        flagged = bool(hits)
        # mostly control bytes: rules may still match, the error heuristic must not ("nan" in junk)
        # (printable ASCII, the common case, has no control byte and no U+FFFD: no search)
        binary = not (text.isascii() and text.isprintable()) and bool(_BINARY_RE.search(text)) \
            and len(_BINARY_RE.findall(text)) * 4 > len(text)
        if hits:
            countable = None
            self._record(hits, text, line_no, rank, host)
        elif "exception" in text and _CHAIN_RE.search(text):  # (both markers hold the word)
            countable = None
            self._chain_pending.add(rank)
        elif not binary and _ERROR_HINT.Match(text):
            flagged = True
            if len(self._flagged) < MAX_FLAGGED:
                self._flagged.append((line_no, text))
                countable = False
        if binary:
            key = text = BINARY_TEXT
            if countable:
                countable = False
        else:
            key = fold_key(text)
        tpl = self._templates.get(key)
        if tpl is None:
            if len(self._templates) >= MAX_TEMPLATES and not flagged:
                return None, countable, rank_m, host_m
            tpl = Template(text=text, first_line=line_no, last_line=line_no)
            self._templates[key] = tpl
        else:
            tpl.count += 1
            tpl.last_line = line_no
            tpl.last_text = text
        tpl.flagged = tpl.flagged or flagged
        if rank is not None and len(tpl.ranks) < MAX_SET_MEMBERS:
            tpl.ranks.add(rank)
        if host is not None and len(tpl.hosts) < MAX_SET_MEMBERS:
            tpl.hosts.add(host)
        if flagged and tpl.count == 1:
            self._add_context(lines, i, base)
        return tpl, countable, rank_m, host_m

    def _record(self, hits: list[Hit[DiagnosisRule]], text: str, line_no: int,
                rank: int | None, host: str | None) -> None:
        best = max(hits, key=lambda h: h.rule.priority)
        groups = best.groups
        if "rank" in groups and groups["rank"].isdigit():
            rank = int(groups["rank"])
        named = groups.get("host")
        # a placeholder a program prints for a host name it could not tell (`host_unknown`) names
        # nothing: the line's launcher or Ray prefix still does
        host = named if named and named.lower() not in PLACEHOLDER_HOSTS else host
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
                self._context.setdefault(base + j, decode_line(lines[j][: self.line_cap]))
            elif -j <= len(self._tail):
                self._context.setdefault(base + j, decode_line(self._tail[j][: self.line_cap]))
        for j in range(i + 1, min(i + 1 + CONTEXT_AFTER, len(lines))):
            self._context.setdefault(base + j, decode_line(lines[j][: self.line_cap]))
        self._after = max(0, i + 1 + CONTEXT_AFTER - len(lines))

    def _owe_context(self, lines: list[bytes], base: int) -> None:
        for j in range(min(self._after, len(lines))):
            self._context.setdefault(base + j, decode_line(lines[j][: self.line_cap]))
        self._after = 0

    # ---- result ---------------------------------------------------------------------------
    def partial(self) -> Partial:
        """Everything this compressor found, as plain picklable data (line numbers local)."""
        kept, overflow = self._slots.fold()
        self.lines_kept += kept
        self.overflow_lines += overflow
        dropped_by_rule: Counter = Counter()
        for shape, count in self._dropped_shapes.items():
            dropped_by_rule[self.ruleset.filters[self._drop[shape]].id] += count
        for idx, count in self._str_dropped.items():
            dropped_by_rule[self.ruleset.filters[idx].id] += count
        lines_dropped = sum(self._dropped_shapes.values()) + sum(self._str_dropped.values())
        if self._table is not None:
            c_counts = Counter(dict(enumerate(self._table.counts()))) + self._c_dropped
            for idx, count in c_counts.items():
                if count:
                    dropped_by_rule[self.ruleset.filters[idx].id] += count
            lines_dropped += sum(c_counts.values())
        if self.binary_lines:
            dropped_by_rule[BINARY_RULE_ID] += self.binary_lines
            lines_dropped += self.binary_lines
        progress = [(line_no, decode_line(raw)) for line_no, raw in self._progress]
        return Partial(
            templates=self._templates, context=self._context, occurrences=self._occ,
            rule_counts=self.rule_counts, metrics=self._metrics.points, nan_points=self._metrics.nan,
            progress=progress, flagged=self._flagged, known_ranks=self._known_ranks,
            known_hosts=self._known_hosts, dropped_by_rule=dropped_by_rule,
            lines_dropped=lines_dropped, lines_in=self.lines_in, lines_kept=self.lines_kept,
            bytes_in=self.bytes_in, lines_cut=self.lines_cut, overflow_lines=self.overflow_lines,
            binary_bytes=self.binary_bytes, binary_chunks=self.binary_chunks, rank_hosts=self.rank_hosts,
            signal_shapes={shape: sig.as_row() for shape, sig in self._sig.items()})

    def finish(self, report: IngestReport) -> CompressedLog:
        return build_log(self.partial(), self.ruleset, report)


