"""Inline SVG charts (no script, no CDN): sparklines, bar rows and the metric series of a job.
Pure functions returning markup; colours come from CSS classes so dark mode follows the page."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from html import escape
from typing import Any

from markupsafe import Markup

SERIES = [("loss", "loss"), ("grad_norm", "grad norm"), ("throughput", "throughput"),
          ("loss_scale", "loss scale"), ("lr", "learning rate")]
SPIKE_FACTOR = 6.0  # a point this many (scaled) MADs above the median of the 10 before it is a spike
SPIKE_WINDOW = 10


def sparkline(values: list[int], *, width: int = 112, height: int = 24, label: str = "") -> Markup:
    if not values:
        return Markup("")
    top = max(values) or 1
    step = width / max(1, len(values))
    bars = []
    for i, v in enumerate(values):
        h = 0 if not v else max(2.0, v / top * (height - 2))
        bars.append(f'<rect x="{i * step:.1f}" y="{height - h:.1f}" width="{max(1.0, step - 1):.1f}" '
                    f'height="{h:.1f}"><title>{v}</title></rect>')
    return Markup(f'<svg class="spark" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
                  f'role="img" aria-label="{escape(label)}">{"".join(bars)}</svg>')


def bar(share: float, *, label: str = "", width: int = 160) -> Markup:
    """A horizontal bar for a 0..1 share (tables with bars)."""
    w = max(0.0, min(1.0, share)) * width
    return Markup(f'<svg class="bar" viewBox="0 0 {width} 12" width="{width}" height="12" role="img" '
                  f'aria-label="{escape(label)}"><rect class="track" width="{width}" height="12"/>'
                  f'<rect class="fill" width="{w:.1f}" height="12"/></svg>')


def column_chart(points: list[tuple[str, float]], *, width: int = 1200, height: int = 160,
                 label: str = "") -> Markup:
    """Vertical bars, one per period (the trend over time)."""
    if not points:
        return Markup("")
    top = max(v for _, v in points) or 1.0
    step = width / len(points)
    parts = []
    for i, (key, v) in enumerate(points):
        h = v / top * (height - 20)
        parts.append(f'<g><rect x="{i * step + 1:.1f}" y="{height - 16 - h:.1f}" width="{max(1.0, step - 2):.1f}" '
                     f'height="{h:.1f}"><title>{escape(key)}: {v:g}</title></rect>'
                     f'<text x="{i * step + step / 2:.1f}" y="{height - 3}" text-anchor="middle">'
                     f'{escape(key[-5:]) if len(points) <= 16 or i % max(1, len(points) // 8) == 0 else ""}</text></g>')
    return Markup(f'<svg class="columns" viewBox="0 0 {width} {height}" width="100%" role="img" '
                  f'aria-label="{escape(label)}">{"".join(parts)}</svg>')


@dataclass
class SeriesChart:
    key: str
    title: str
    svg: Markup
    points: int
    spikes: int


def spikes(values: list[float]) -> list[int]:
    """Indices of points far above the recent median (robust to noisy series)."""
    out = []
    for i in range(SPIKE_WINDOW, len(values)):
        window = values[i - SPIKE_WINDOW:i]
        med = statistics.median(window)
        mad = statistics.median(abs(v - med) for v in window) or abs(med) * 0.05 or 1e-9
        if values[i] > med + SPIKE_FACTOR * mad * 1.4826 and values[i] > med * 1.5:
            out.append(i)
    return out


def metric_charts(points: list[dict[str, Any]] | None, *, last_progress_line: int | None,
                  failure_line: int | None, evidence_lines: set[int] | frozenset[int] = frozenset(),
                  width: int = 640, height: int = 150) -> list[SeriesChart]:
    """One chart per metric present: x is the log line (so the failure and the last progress
    can be drawn on the same axis), y the value; spikes, the points the diagnosis cites as
    evidence (a loss spike found by the pipeline) and NaN/inf points are marked."""
    points = points or []
    nan_lines = [p["line"] for p in points if p.get("nan")]
    charts = []
    for key, title in SERIES:
        series = [(p["line"], p["values"][key], p.get("step")) for p in points if key in (p.get("values") or {})]
        if len(series) < 2:
            continue
        xs = [s[0] for s in series] + nan_lines + [x for x in (last_progress_line, failure_line) if x]
        x0, x1 = min(xs), max(xs)
        ys = [s[1] for s in series]
        y0, y1 = min(ys), max(ys)
        if y1 == y0:
            y1 = y0 + 1.0
        pad_l, pad_r, pad_t, pad_b = 56, 8, 8, 18

        def sx(x: float) -> float:
            return pad_l + (x - x0) / max(1, x1 - x0) * (width - pad_l - pad_r)

        def sy(y: float) -> float:
            return pad_t + (1 - (y - y0) / (y1 - y0)) * (height - pad_t - pad_b)

        path = " ".join(f"{'M' if i == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for i, (x, y, _) in enumerate(series))
        parts = [f'<text class="axis" x="{pad_l - 4}" y="{pad_t + 8}" text-anchor="end">{y1:.4g}</text>',
                 f'<text class="axis" x="{pad_l - 4}" y="{height - pad_b}" text-anchor="end">{y0:.4g}</text>',
                 f'<text class="axis" x="{pad_l}" y="{height - 4}">line {x0}</text>',
                 f'<text class="axis" x="{width - pad_r}" y="{height - 4}" text-anchor="end">line {x1}</text>',
                 f'<path class="series" d="{path}" fill="none"/>']
        spike_idx = spikes(ys) if key in ("loss", "grad_norm") else []
        if key == "loss":
            spike_idx = sorted(set(spike_idx) | {i for i, (x, _, _) in enumerate(series) if x in evidence_lines})
        for i in spike_idx:
            x, y, step = series[i]
            parts.append(f'<circle class="spike" cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="4">'
                         f'<title>spike: {y:.4g} at {f"step {step}, " if step is not None else ""}line {x}</title></circle>')
        for line in nan_lines:
            parts.append(f'<text class="nan" x="{sx(line):.1f}" y="{pad_t + 10}" text-anchor="middle">✕'
                         f'<title>NaN/inf at line {line}</title></text>')
        if last_progress_line:
            x = sx(last_progress_line)
            parts.append(f'<line class="progress" x1="{x:.1f}" x2="{x:.1f}" y1="{pad_t}" y2="{height - pad_b}">'
                         f'<title>last progress (line {last_progress_line})</title></line>')
        if failure_line:
            x = sx(failure_line)
            parts.append(f'<line class="failure" x1="{x:.1f}" x2="{x:.1f}" y1="{pad_t}" y2="{height - pad_b}">'
                         f'<title>root cause evidence (line {failure_line})</title></line>')
        svg = Markup(f'<svg class="metric" viewBox="0 0 {width} {height}" width="100%" role="img" '
                     f'aria-label="{escape(title)} over the log, {len(series)} points, {len(spike_idx)} spikes">'
                     f'{"".join(parts)}</svg>')
        charts.append(SeriesChart(key, title, svg, len(series), len(spike_idx)))
    return charts
