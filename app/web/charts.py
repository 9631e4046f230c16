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
    axis: str = "step"  # what x is: step | log line
    fmt: str = ""  # the line format of the series, when the log prints the metric in several
    x_range: tuple[float, float] = (0.0, 0.0)


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


HOVER_COLUMNS = 96  # hover cells per chart: each tells the lowest and highest value under it
CHAR_PX = 6.6  # width of one axis-label character (11px monospace-ish): the left margin fits the labels


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def metric_charts(points: list[dict[str, Any]] | None, *, last_progress_line: int | None,
                  failure_line: int | None, evidence_lines: set[int] | frozenset[int] = frozenset(),
                  root_cause: dict[str, Any] | None = None, zoom: tuple[float, float] | None = None,
                  width: int = 640, height: int = 170) -> list[SeriesChart]:
    """One chart per metric and per line format (a log printing throughput in two layouts gets
    two charts: their units differ). x is the training step when the points carry one, else the
    log line (labelled so). The stored series keeps each bucket's lowest and highest point
    (`app.core.compressed.series_points`) and every point is drawn, so a spike is drawn at its
    height; NaN/inf points, the last finite step before a non-finite loss, the onset of a spike,
    the last progress and the failure are marked. Hover cells (`<title>`, no script) give the
    values; `zoom` = (x0, x1) draws that window only (the page's links and brush set it)."""
    points = points or []
    root_cause = root_cause or {}
    finite = [p for p in points if p.get("values")]
    with_step = [p for p in finite if p.get("step") is not None]
    by_step = bool(finite) and len(with_step) >= 0.8 * len(finite)
    axis = "step" if by_step else "log line"
    line_to_step = sorted((p["line"], p["step"]) for p in with_step)

    def x_of_line(line: int | None) -> float | None:
        if line is None:
            return None
        if not by_step:
            return float(line)
        before = [st for ln, st in line_to_step if ln <= line]
        return float(before[-1]) if before else None

    def x_of(p: dict[str, Any]) -> float | None:
        if by_step:
            return float(p["step"]) if p.get("step") is not None else x_of_line(p["line"])
        return float(p["line"])

    nan_marks = [(x_of(p), p) for p in points if p.get("nan")]
    nan_marks = [(x, p) for x, p in nan_marks if x is not None]
    last_good = root_cause.get("last_good_step") if by_step else None
    onset = root_cause.get("onset_step") if by_step else None
    non_finite = root_cause.get("error_type") in ("NaNLoss", "NaNGradient", "LossDiverged")
    marks = {"progress": x_of_line(last_progress_line), "failure": x_of_line(failure_line)}
    charts = []
    for key, title in SERIES:
        formats: dict[str, list[tuple[float, float, dict]]] = {}
        for p in finite:
            if key in p["values"]:
                x = x_of(p)
                if x is not None:
                    formats.setdefault(p.get("fmt") or "", []).append((x, p["values"][key], p))
        formats = {f: sorted(v, key=lambda t: t[0]) for f, v in formats.items() if len(v) >= 2}
        for n, (fmt, series) in enumerate(sorted(formats.items(), key=lambda kv: -len(kv[1]))):
            named = f"{title} · line format {n + 1} of {len(formats)}" if len(formats) > 1 else title
            chart = _chart(key, named, series, axis, nan_marks, marks, evidence_lines,
                           last_good if non_finite else None, onset, zoom, width, height)
            if chart is not None:
                chart.fmt = fmt if len(formats) > 1 else ""
                charts.append(chart)
    return charts


def _chart(key: str, title: str, series: list[tuple[float, float, dict]], axis: str,
           nan_marks: list[tuple[float, dict]], marks: dict[str, float | None], evidence_lines,  # noqa: ANN001
           last_good: int | None, onset: int | None, zoom: tuple[float, float] | None,
           width: int, height: int) -> SeriesChart | None:
    full = (series[0][0], series[-1][0])
    if zoom is not None:
        series = [t for t in series if zoom[0] <= t[0] <= zoom[1]]
        if len(series) < 2:
            return None
    xs = [t[0] for t in series]
    extra = [x for x in (*(m for m in marks.values()), last_good, onset) if x is not None]
    extra += [x for x, _ in nan_marks]
    if zoom is None:
        xs_all = xs + extra
    else:
        xs_all = xs
    x0, x1 = min(xs_all), max(xs_all)
    if x1 == x0:
        x1 = x0 + 1
    ys = [t[1] for t in series]
    y0, y1 = min(ys), max(ys)
    if y1 == y0:
        y1 = y0 + 1.0
    labels = [_fmt(y1), _fmt((y0 + y1) / 2), _fmt(y0)]
    pad_l = 10 + CHAR_PX * max(len(t) for t in labels)
    pad_r, pad_t, pad_b = 10, 10, 30
    plot_w, plot_h = width - pad_l - pad_r, height - pad_t - pad_b

    def sx(x: float) -> float:
        return pad_l + (x - x0) / (x1 - x0) * plot_w

    def sy(y: float) -> float:
        return pad_t + (1 - (y - y0) / (y1 - y0)) * plot_h

    def where(x: float, p: dict | None = None) -> str:
        if axis == "step":
            return f"step {int(x)}" + (f", line {p['line']}" if p else "")
        return f"line {int(x)}"

    parts = [f'<text class="axis" x="{pad_l - 4:.1f}" y="{pad_t + 4}" text-anchor="end">{labels[0]}</text>',
             f'<text class="axis" x="{pad_l - 4:.1f}" y="{pad_t + plot_h / 2 + 4:.1f}" text-anchor="end">{labels[1]}</text>',
             f'<text class="axis" x="{pad_l - 4:.1f}" y="{pad_t + plot_h + 4:.1f}" text-anchor="end">{labels[2]}</text>',
             f'<line class="grid" x1="{pad_l:.1f}" x2="{width - pad_r}" y1="{pad_t + plot_h:.1f}" y2="{pad_t + plot_h:.1f}"/>',
             f'<text class="axis" x="{pad_l:.1f}" y="{height - 14}">{int(x0)}</text>',
             f'<text class="axis" x="{pad_l + plot_w / 2:.1f}" y="{height - 14}" text-anchor="middle">{int((x0 + x1) / 2)}</text>',
             f'<text class="axis" x="{width - pad_r}" y="{height - 14}" text-anchor="end">{int(x1)}</text>',
             f'<text class="axis-name" x="{pad_l + plot_w / 2:.1f}" y="{height - 2}" text-anchor="middle">'
             f'{"training step" if axis == "step" else "log line (the log prints no step)"}</text>']
    if last_good is not None and x0 <= last_good <= x1:
        # the loss is finite up to last_good and not after it: shade the rest
        left = sx(last_good)
        parts.append(f'<rect class="nonfinite" x="{left:.1f}" y="{pad_t}" width="{max(2.0, pad_l + plot_w - left):.1f}" '
                     f'height="{plot_h:.1f}"><title>non-finite loss after step {last_good} (the last finite step)</title></rect>')
    path = " ".join(f"{'M' if i == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for i, (x, y, _) in enumerate(series))
    parts.append(f'<path class="series" d="{path}" fill="none"/>')
    spike_idx = spikes(ys) if key in ("loss", "grad_norm") else []
    if key == "loss":
        spike_idx = sorted(set(spike_idx) | {i for i, (_, _, p) in enumerate(series) if p["line"] in evidence_lines})
    for i in spike_idx:
        x, y, p = series[i]
        parts.append(f'<circle class="spike" cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="4">'
                     f'<title>spike: {_fmt(y)} at {where(x, p)}</title></circle>')
    for x, p in nan_marks:
        if x0 <= x <= x1:
            parts.append(f'<text class="nan" x="{sx(x):.1f}" y="{pad_t + 10}" text-anchor="middle">✕'
                         f'<title>{"/".join(p["nan"])} NaN/inf at {where(x)}, line {p["line"]}</title></text>')
    if onset is not None and x0 <= onset <= x1:
        parts.append(f'<line class="onset" x1="{sx(onset):.1f}" x2="{sx(onset):.1f}" y1="{pad_t}" y2="{pad_t + plot_h:.1f}">'
                     f'<title>onset: step {onset}</title></line>')
    for name, x in marks.items():
        if x is not None and x0 <= x <= x1:
            what = "last progress" if name == "progress" else "root-cause evidence"
            parts.append(f'<line class="{name}" x1="{sx(x):.1f}" x2="{sx(x):.1f}" y1="{pad_t}" y2="{pad_t + plot_h:.1f}">'
                         f'<title>{what} ({where(x)})</title></line>')
    # hover cells: the lowest and highest value under each, with where they are
    cols = min(HOVER_COLUMNS, max(1, len(series)))
    cell = plot_w / cols
    j = 0
    for c in range(cols):
        lo_x, hi_x = x0 + (x1 - x0) * c / cols, x0 + (x1 - x0) * (c + 1) / cols
        inside = []
        while j < len(series) and (series[j][0] < hi_x or (c == cols - 1 and series[j][0] <= hi_x)):
            inside.append(series[j])
            j += 1
        if not inside:
            continue
        lo, hi = min(inside, key=lambda t: t[1]), max(inside, key=lambda t: t[1])
        tip = (f"{where(hi[0], hi[2])}: {key} {_fmt(hi[1])}" if lo is hi or lo[1] == hi[1] else
               f"{where(inside[0][0])}–{int(inside[-1][0])}: {key} {_fmt(lo[1])} … {_fmt(hi[1])} "
               f"(highest at {where(hi[0])}, {len(inside)} points)")
        parts.append(f'<rect class="hover" x="{pad_l + c * cell:.1f}" y="{pad_t}" width="{cell:.1f}" '
                     f'height="{plot_h:.1f}" data-lo="{lo_x:.6g}" data-hi="{hi_x:.6g}"><title>{escape(tip)}</title></rect>')
    svg = Markup(f'<svg class="metric" viewBox="0 0 {width} {height}" width="100%" role="img" data-axis="{axis}" '
                 f'data-x0="{x0:.6g}" data-x1="{x1:.6g}" data-pad-l="{pad_l:.1f}" data-plot-w="{plot_w:.1f}" '
                 f'data-width="{width}" aria-label="{escape(title)} by {axis}, {len(series)} points, '
                 f'{len(spike_idx)} spikes, from {_fmt(y0)} to {_fmt(y1)}">{"".join(parts)}</svg>')
    return SeriesChart(key, title, svg, len(series), len(spike_idx), axis=axis, x_range=full)
