"""Live watching of a running job's log: stalls and stragglers, while the job still runs.

Progress lines are recognised by the filter rules marked `progress: true` (rules/filters/), with
their `step` and `time` (ms per step) groups; ranks and hosts come from the launcher prefixes
(app/core/fields.py). A stall is no progress marker for `factor` x the job's own typical step
time (learned from its metric lines, else from the spacing of its progress lines), never less
than `floor_s`; a log with no progress line yet (the job is starting: imports, rendezvous, a
checkpoint load) is stalled only when it has not grown for `startup_s`. A straggler is a
rank whose median step time is `straggler_factor` x the median of all ranks.

Pure: fed lines and clock readings; the CLI (`logdx watch`) does the file following.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

from app.core.fields import extract_host, extract_rank
from app.core.rules import RuleSet

MIN_SAMPLES = 3


@dataclass(frozen=True)
class Alert:
    kind: str  # stall | straggler
    at: float
    message: str
    details: dict = field(default_factory=dict)


class LiveWatcher:
    def __init__(self, ruleset: RuleSet, *, factor: float = 5.0, floor_s: float = 120.0,
                 straggler_factor: float = 2.0, window: int = 50, startup_s: float | None = None) -> None:
        self.rules = [r for r in ruleset.filters if r.spec.progress]
        self.factor, self.floor_s, self.straggler_factor = factor, floor_s, straggler_factor
        # no progress line yet: the job is starting (imports, rendezvous, checkpoint load)
        self.startup_s = max(floor_s, startup_s) if startup_s is not None else floor_s
        self.step_times: deque[float] = deque(maxlen=window)  # seconds per step, from `time` groups
        self.intervals: deque[float] = deque(maxlen=window)   # seconds between progress lines
        self.per_rank: dict[str, deque[float]] = {}
        self.last_progress_at: float | None = None
        self.last_growth_at: float | None = None
        self.last_step: int | None = None
        self.last_line: str | None = None
        self.stalled = False
        self.stragglers: set[str] = set()

    def _match(self, line: str):  # noqa: ANN202
        for rule in self.rules:
            m = rule.regex.search(line)
            if m:
                return m
        return None

    def feed(self, lines: list[str], now: float) -> list[Alert]:
        alerts: list[Alert] = []
        if lines:
            self.last_growth_at = now
        for line in lines:
            m = self._match(line)
            if m is None:
                continue
            groups = m.groupdict()
            step = groups.get("step")
            ms = groups.get("time")
            if self.last_progress_at is not None and now > self.last_progress_at:
                self.intervals.append(now - self.last_progress_at)
            self.last_progress_at = now
            self.last_step = int(step) if step and step.isdigit() else self.last_step
            self.last_line = line[:300]
            if self.stalled:
                self.stalled = False
            if ms:
                try:
                    seconds = float(ms) / 1000.0
                except ValueError:
                    continue
                self.step_times.append(seconds)
                who = extract_rank(line)
                key = f"rank {who}" if who is not None else (extract_host(line) or "")
                if key:
                    self.per_rank.setdefault(key, deque(maxlen=20)).append(seconds)
        alerts.extend(self._stragglers(now))
        return alerts

    def typical_step_s(self) -> float | None:
        if len(self.step_times) >= MIN_SAMPLES:
            return statistics.median(self.step_times)
        if len(self.intervals) >= MIN_SAMPLES:
            return statistics.median(self.intervals)
        return None

    def stall_after_s(self) -> float:
        typical = self.typical_step_s()
        return max(self.floor_s, self.factor * typical) if typical else self.floor_s

    def tick(self, now: float) -> list[Alert]:
        """Check for a stall; one alert per stall (progress clears it)."""
        if self.stalled:
            return []
        limit = self.stall_after_s()
        since_progress = now - self.last_progress_at if self.last_progress_at is not None else None
        since_growth = now - self.last_growth_at if self.last_growth_at is not None else None
        if since_progress is not None and since_progress > limit:
            self.stalled = True
            return [Alert("stall", now, f"no progress for {since_progress:.0f} s (limit {limit:.0f} s: "
                          f"{self.factor:g} x typical step {self.typical_step_s() or 0:.1f} s, floor {self.floor_s:g} s); "
                          f"last step {self.last_step}",
                          {"last_step": self.last_step, "last_line": self.last_line, "limit_s": limit,
                           "since_progress_s": since_progress, "log_growing": bool(since_growth is not None and since_growth < limit)})]
        if since_progress is None and since_growth is not None and since_growth > self.startup_s:
            self.stalled = True
            return [Alert("stall", now, f"the log has not grown for {since_growth:.0f} s and shows no progress "
                          f"(start-up allowance {self.startup_s:g} s)",
                          {"last_step": None, "limit_s": self.startup_s, "since_growth_s": since_growth})]
        return []

    def _stragglers(self, now: float) -> list[Alert]:
        medians = {k: statistics.median(v) for k, v in self.per_rank.items() if len(v) >= MIN_SAMPLES}
        if len(medians) < 3:
            return []
        overall = statistics.median(medians.values())
        alerts = []
        for key, med in sorted(medians.items()):
            slow = med > self.straggler_factor * overall
            if slow and key not in self.stragglers:
                self.stragglers.add(key)
                alerts.append(Alert("straggler", now, f"{key} takes {med:.2f} s per step, the median rank "
                                    f"{overall:.2f} s ({med / overall:.1f}x)",
                                    {"who": key, "step_s": med, "median_s": overall}))
            elif not slow:
                self.stragglers.discard(key)
        return alerts
