"""The exact onset of a loss spike or non-finite loss, read again from the log.

The compressor reads only a sample of the metric lines (METRIC_SAMPLES_PER_CHUNK per chunk), so
a spike is first seen at the first *sampled* line after it began: a few steps late on a small
log, hundreds on a large one. A rollback to "the checkpoint before the onset" must not land on a
checkpoint saved after the true onset, and the data skipped must start there. When the log can
be read again (a file, not a consumed stream), the lines between the last healthy sample and the
first bad one are read once more, every metric line among them parsed, and the onset moved to
the first line that is bad by the same test (a spike over the same baseline, or a non-finite
loss / grad norm); the last healthy step becomes the metric line right before it.

Reading again costs one more pass over the log up to the onset (decoding included), only when a
loss spike or a non-finite loss is the root cause. Without a second read the sampled bounds stay
(the controller then rolls back to before the last healthy sample: safe, only less precise).
"""

from __future__ import annotations

import math
from pathlib import Path

from app.core import signals
from app.core.compressed import MetricPoint, decode_line
from app.core.fields import DIGITS
from app.core.events import ErrorEvent, is_spike
from app.core.ingest import IngestReport, iter_chunks
from app.core.metricsample import MetricSampler
from app.core.rules import RuleSet
from app.core.signals import ShapeSignal
from app.core.types import ErrorType

MAX_REREAD_LINES = 2_000_000  # lines between the bounds parsed at most (a bound on the work)


def rereadable(source: object) -> Path | None:
    if isinstance(source, (str, Path)) and Path(source).is_file():
        return Path(source)
    return None


def _points_between(path: Path, ruleset: RuleSet, lo: int, hi: int,
                    signal_shapes: dict[bytes, tuple] | None = None) -> list[MetricPoint]:
    """Every metric point (finite or not) on lines lo < n <= hi, in order: of the filter rules
    that extract metrics, and of the kept shapes the format-free reader recognised
    (`signal_shapes`, CompressedLog.signal_shapes)."""
    filters, diag = ruleset.matchers()
    sampler = MetricSampler(lambda _text: None)
    shapes = {shape: ShapeSignal.from_row(row) for shape, row in (signal_shapes or {}).items()} \
        if signals.enabled() else {}
    line_no = 0
    for chunk in iter_chunks(path, IngestReport()):
        n = chunk.count(b"\n") + (not chunk.endswith(b"\n"))
        if line_no + n <= lo:
            line_no += n
            continue
        for raw in chunk.split(b"\n")[:n]:
            line_no += 1
            if line_no <= lo:
                continue
            if line_no > hi:
                break
            text = decode_line(raw)
            if shapes and (sig := shapes.get(raw.translate(None, DIGITS))) is not None:
                sampler.extract_signal(sig, text, line_no)
                continue
            idx = filters.first(text)
            if idx is None or diag.any(text) or not ruleset.filters[idx].spec.extract:
                continue
            sampler.extract(ruleset.filters[idx], text, line_no)
        if line_no >= hi:
            break
    return sorted(sampler.points + sampler.nan, key=lambda p: p.line)


def _bad(point: MetricPoint, ev: ErrorEvent) -> bool:
    if ev.error_type is ErrorType.NaNLoss:
        return not all(math.isfinite(point.values.get(k, 0.0)) for k in ("loss", "grad_norm"))
    loss = point.values.get("loss")
    return loss is not None and math.isfinite(loss) and ev.baseline is not None and is_spike(loss, ev.baseline)


def refine_onset(source: object, ruleset: RuleSet, ev: ErrorEvent | None,
                 signal_shapes: dict[bytes, tuple] | None = None) -> bool:
    """Move a spike / non-finite event's onset to the first bad metric line after its last
    healthy sample, reading the log again; True when the bounds changed. `signal_shapes`: the
    log's CompressedLog.signal_shapes (metric lines of layouts no filter rule knows)."""
    if ev is None or ev.error_type not in (ErrorType.LossSpike, ErrorType.NaNLoss):
        return False
    path = rereadable(source)
    lo, hi = ev.last_good_line, ev.first_line
    if path is None or hi - lo <= 1 or hi - lo > MAX_REREAD_LINES:
        return False
    points = _points_between(path, ruleset, lo, hi, signal_shapes)
    # the event's own line may be no metric point (a diagnosis rule matched it): then every
    # point read is before the onset
    first_bad = next((i for i, p in enumerate(points) if _bad(p, ev)), len(points))
    healthy = [p for p in points[:first_bad] if p.step is not None]
    changed = False
    if first_bad < len(points) and points[first_bad].line != ev.first_line:
        bad = points[first_bad]
        ev.first_line, ev.text = bad.line, bad.text or ev.text
        if bad.step is not None:
            ev.onset_step = bad.step
        if ev.error_type is ErrorType.LossSpike and ev.baseline is not None:
            ev.hint = f"loss {bad.values['loss']:.4g} vs recent median {ev.baseline:.4g}"
        changed = True
    if healthy and healthy[-1].step != ev.last_good_step and (ev.onset_step is None or healthy[-1].step < ev.onset_step):
        ev.last_good_step, ev.last_good_line = healthy[-1].step, healthy[-1].line
        changed = True
    return changed
