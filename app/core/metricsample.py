"""Training metrics read from the metric lines the compressor drops.

Metric lines are dropped by filter rules whose pattern names the values (`loss`, `grad_norm`,
`loss_scale`, `lr`, `throughput`, `step`); a sample of them per chunk is read into the log's metric
series (bounded: see `thin_metrics`). A NaN or inf loss/grad norm is kept apart: a shape whose
values turn NaN is a new shape (`nan` has no digits), so every such line is read.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from itertools import compress

from app.core.compressed import MAX_METRIC_POINTS, MetricPoint, decode_line, thin_metrics
from app.core.rules import FilterRule, bounded_search
from app.core.signals import ShapeSignal

METRIC_SAMPLES_PER_CHUNK = 64
MAX_NAN_POINTS = 100
_VALUES = ("loss", "grad_norm", "loss_scale", "lr", "throughput")


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


class MetricSampler:
    """The metric series and NaN points of one compressor. Every metric line read is passed to
    `note_rank` (the compressor's): a rank that only prints metrics still exists."""

    def __init__(self, note_rank: Callable[[str], None]) -> None:
        self.points: list[MetricPoint] = []
        self.nan: list[MetricPoint] = []
        self._note_rank = note_rank
        self._extracted: set[int] = set()  # line numbers already read in this chunk
        self._loss_rules: set[str] = set()  # missing_loss_is_nan rules whose lines carried a loss

    def new_chunk(self) -> None:
        self._extracted.clear()

    def extract(self, rule: FilterRule, text: str, line_no: int) -> None:
        if line_no in self._extracted:  # a new shape's first line may be sampled again
            return
        self._extracted.add(line_no)
        self._note_rank(text)
        try:
            m = bounded_search(rule.regex, text)
        except TimeoutError:
            return
        if not m:
            return
        groups = m.groupdict()
        values = {}
        for name in _VALUES:
            raw = groups.get(name)
            if raw is not None:
                v = _float(raw)
                if v is not None:
                    values[name] = v
        step_raw = groups.get("step")
        step = int(step_raw) if step_raw and step_raw.isdigit() else None
        if rule.spec.missing_loss_is_nan and step is not None:
            if "loss" in values:
                self._loss_rules.add(rule.id)
            elif (rule.id in self._loss_rules and not int(groups.get("skipped") or 0)
                  and ("loss_scale" in values or "grad_norm" in values)):
                # the loss was left out: not positive, i.e. NaN. A field printed after it (loss
                # scale, grad norm) shows the line was not cut short; an interval whose iterations
                # were all skipped for an fp16 overflow has no loss either, and says so
                values["loss"] = math.nan
        self.add(MetricPoint(line_no, step, values, text[:500]))

    def extract_signal(self, signal: ShapeSignal, text: str, line_no: int) -> None:
        """Read a line of a shape the format-free reader recognised (app/core/signals.py)."""
        if line_no in self._extracted:
            return
        self._extracted.add(line_no)
        self._note_rank(text)
        reading = signal.read(text)
        if reading is not None and reading.values:
            self.add(MetricPoint(line_no, reading.step, reading.values, text[:500]))

    def add(self, point: MetricPoint) -> None:
        """A metric point: into the NaN points when its loss or grad norm is not finite."""
        values = point.values
        loss, grad_norm = values.get("loss", 0.0), values.get("grad_norm", 0.0)
        if not (math.isfinite(loss) and math.isfinite(grad_norm)):  # a NaN/inf loss or grad norm
            if len(self.nan) < MAX_NAN_POINTS:
                self.nan.append(point)
            return
        if values:
            self.points.append(point)
            if len(self.points) > MAX_METRIC_POINTS:
                self.points = thin_metrics(self.points)

    def sample(self, lines: list[bytes], shapes: list[bytes], base: int, first: int,
               extract: dict[bytes, int | ShapeSignal], rules: list[FilterRule]) -> None:
        """Pure-Python scan loop: read up to METRIC_SAMPLES_PER_CHUNK evenly spaced lines of
        `lines` (which holds shapes[first:]) whose shape is in `extract` (shape -> rule index,
        or the ShapeSignal of a kept shape the format-free reader recognised)."""
        idx = list(compress(range(first, len(shapes)), map(extract.__contains__, shapes[first:] if first else shapes)))
        if not idx:
            return
        step = max(1, len(idx) // METRIC_SAMPLES_PER_CHUNK)
        picked = idx[::step]
        if picked[-1] != idx[-1]:
            picked.append(idx[-1])
        for i in picked:
            how = extract[shapes[i]]
            if isinstance(how, ShapeSignal):
                self.extract_signal(how, decode_line(lines[i - first]), base + i)
            else:
                self.extract(rules[how], decode_line(lines[i - first]), base + i)
