"""Wall-clock times read from log lines, whatever the emitter's layout.

A log line's time is the first of: an ISO-like date and time (`2024-05-01 03:56:11`,
`2024-05-01T03:56:11.123`, `[2024-05-01 03:56:11,486]`), glog's `I0515 20:03:26.569` (month, day
and time; TensorFlow, XLA, JAX, Abseil), or a bare `HH:MM:SS` (day rollover not seen; not a
progress bar's elapsed/remaining times or an `eta:`, which are durations). Only
differences between the times of one log are used (how long the lines after the last training
step cover), so a layout's year or time zone never matters; times of different layouts are not
compared. Pure functions, no I/O.
"""

from __future__ import annotations

from app.core import regexcache

_ISO = regexcache.compile(r"(?<!\d)(\d{4})-(\d{2})-(\d{2})[ T_](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,6}))?(?!\d)")
_GLOG = regexcache.compile(r"(?<![\w])[IWEF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?(?!\d)")
# (not a duration: a progress bar's `[10:03:27<10:03:22`, mmengine's `eta: 12:46:39`)
_CLOCK = regexcache.compile(r"(?<![\d:.<])(?<!eta: )(?<!eta )(\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,6}))?(?![\d:<])")

_DAY = 86400.0


def _frac(digits: str | None) -> float:
    return int(digits) / 10 ** len(digits) if digits else 0.0


def line_time(text: str) -> tuple[str, float] | None:
    """(layout, seconds) of the line's first time stamp, or None. Seconds count from an arbitrary
    origin of that layout: compare only times of the same layout."""
    if m := _ISO.search(text):
        y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
        if 1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and s < 61:
            return "iso", ((y * 12 + mo) * 31 + d) * _DAY + h * 3600 + mi * 60 + s + _frac(m.group(7))
    if m := _GLOG.search(text):
        mo, d, h, mi, s = (int(g) for g in m.groups()[:5])
        if 1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and s < 61:
            return "glog", (mo * 31 + d) * _DAY + h * 3600 + mi * 60 + s + _frac(m.group(6))
    if m := _CLOCK.search(text):
        h, mi, s = (int(g) for g in m.groups()[:3])
        if h < 24 and mi < 60 and s < 61:
            return "clock", h * 3600 + mi * 60 + s + _frac(m.group(4))
    return None


def span_after(before: list[str], after: list[str]) -> float | None:
    """Seconds the lines `after` a point cover, measured from the last time stamp at or before it
    (`before`, in line order) or, when none has one, from the first time stamp after it; None when
    no two lines of one layout carry a time."""
    times = [t for t in map(line_time, after) if t is not None]
    if not times:
        return None
    layout = times[-1][0]
    end = max(sec for lay, sec in times if lay == layout)
    for text in reversed(before):
        t = line_time(text)
        if t is not None and t[0] == layout:
            return end - t[1]
    start = min(sec for lay, sec in times if lay == layout)
    return end - start if len(times) > 1 else None
