"""The facade that chains the stages: ingest -> compress -> events -> rank -> act.

The CLI, the API and batch jobs all call `Pipeline`; it holds the compiled rules and nothing
else, so one instance can serve many diagnoses (it is not tied to a log).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import EllipsisType
from typing import BinaryIO

import regex

from app import __version__
from app.core import ablation
from app.core.compress import CompressedLog, compress_source
from app.core.events import ErrorEvent, events_from_log
from app.core.exceptions import ExceptionView
from app.core.fields import PLACEHOLDER_HOSTS
from app.core.ingest import Limits
from app.core.onset import refine_onset
from app.core.placement import (
    JobPlacement, allocated_host, block_hosts, name_hosts, ranked_suspect_hosts, session_host,
)
from app.core.policy import PolicyContext, deadlines_ms, decide, silent_ranks, uses_loopback_interface
from app.core.rank import ENDS_ON_STEP, Ranking, by_vocabulary, rank_events, stalled_root
from app.core.rules import RuleSet, load_rules
from app.core.secrets import redact_obj
from app.core.subsystems import vocabulary_of
from app.core.timestamps import line_time
from app.core.types import Action, ActionKind, Category, DecidedBy, Diagnosis, ErrorType, Versions, family_of

Source = str | Path | BinaryIO


@dataclass
class DiagnosisResult:
    diagnosis: Diagnosis
    compressed: CompressedLog
    events: list[ErrorEvent]
    ranking: Ranking
    job: JobPlacement | None = None  # what the scheduler registered (hosts, GPU count), if known
    # lines of tracebacks printed at teardown or ignored (app/core/exceptions.py): no failure's lines
    harmless: frozenset[int] = frozenset()


PRECEDING_LINES = 200
# How far back (in lines of the original log) a policy's `preceded_by` looks for what was running
# when the root cause fired. A collective times out while one rank is still in the step that
# holds the others up, so that step printed shortly before the timeout, with no training step in
# between; a checkpoint saved hundreds of steps earlier is history, not a cause.
PRECEDING_WINDOW = 500
# Where the lines carry time stamps, the window is also cut in time: a step that held the others
# up began at most the collectives' deadline before the timeout fired (torch's `Timeout(ms)=N`
# in the root cause's lines, else its default of 30 minutes), plus PRECEDING_SLACK_S for the
# ranks to reach the collective. A save an hour before a 10-minute deadline is history even
# with no progress line in between.
DEFAULT_DEADLINE_S = 1800.0
PRECEDING_SLACK_S = 600.0
# (the deadline as torch's WorkNCCL names it, `Timeout(ms)=N`: policy.deadlines_ms; or how long
# the collective ran before the watchdog gave up)
_RAN_FOR_MS = regex.compile(r"\bran for (\d+) milliseconds before timing out")
# error families whose root cause has a place: its hosts are named whatever its category
PLACED_FAMILIES = frozenset({"gpu", "network", "node"})


def _preceding(log: CompressedLog, ev: ErrorEvent | None) -> tuple[str, ...]:
    """What was happening when the root cause fired: the kept lines, context and progress markers
    in a window before its first line, plus its own lines; what a policy's `preceded_by` reads.

    The window is the last PRECEDING_WINDOW lines of the original log before the root cause, cut
    at the last progress marker before it (training moved on after anything older; the marker
    itself stays, it may be the slow step's own progress bar; a completion marker is kept in the
    line window whatever follows it). A folded line counts by the
    occurrences the template knows (its first and last); one that merely began earlier and is
    still printed later is left out, so a checkpoint save every few hundred steps is not read as
    the cause of every timeout."""
    if ev is None:
        return ()
    end = ev.first_line
    start = max(0, end - PRECEDING_WINDOW)
    before = [p.line for p in log.recent_progress if p.line < end]
    if before:
        start = max(start, max(before))
    lines: dict[int, str] = {}
    for t in log.templates:
        if start <= t.first_line <= end:
            lines[t.first_line] = t.text
        if t.last_line != t.first_line and start <= t.last_line <= end:
            lines[t.last_line] = t.last_line_text
    lines.update({n: t for n, t in log.context.items() if start <= n <= end})
    lines.update({p.line: p.text or "" for p in log.recent_progress if start <= p.line <= end})
    # a completion marker is a state, not a step: training ended there, whatever progress bar
    # closed after it, so it only has to fall in the line window
    if log.completed is not None and end - PRECEDING_WINDOW <= log.completed.line <= end:
        lines[log.completed.line] = log.completed.text or ""
    own = [o.text for o in ev.occurrences[:5]]
    ordered = _within_deadline([lines[n] for n in sorted(lines)], own or [ev.text])[-PRECEDING_LINES:]
    return tuple(ordered + own)


def _within_deadline(ordered: list[str], own: list[str]) -> list[str]:
    """`ordered` (the window's lines in line order) without the lines time-stamped more than the
    collectives' deadline plus PRECEDING_SLACK_S before the root cause (`own`: its lines), and the
    lines before them. Unchanged when the root cause's time is not known or no line of its layout
    is that old."""
    at = next((t for t in map(line_time, own) if t is not None), None)
    if at is None:  # the root cause's own line has no time: the last time stamp before it
        at = next((t for t in map(line_time, reversed(ordered)) if t is not None), None)
    if at is None:
        return ordered
    deadlines = deadlines_ms(own) + [int(m.group(1)) for text in own for m in _RAN_FOR_MS.finditer(text)]
    cutoff = at[1] - (max(deadlines) / 1000 if deadlines else DEFAULT_DEADLINE_S) - PRECEDING_SLACK_S
    for i in range(len(ordered) - 1, -1, -1):
        t = line_time(ordered[i])
        if t is not None and t[0] == at[0] and t[1] < cutoff:
            return ordered[i + 1:]
    return ordered


# tqdm's meter (`32040/500150 [6:28:43<94:39:17, 1.37it/s ...]`, tqdm/std.py format_meter) with
# steps done, printed on the error's own line before it: a bar redrawn with `\r` and no newline,
# whose last state the error's text was glued onto. The job trained before the error.
_GLUED_BAR = regex.compile(r"\b[1-9]\d*/\d+ \[(?:\d+:)?\d+:\d\d<[^\]\n]*\]")


def _bar_before_error(text: str) -> bool:
    m = _GLUED_BAR.search(text)
    return m is not None and bool(text[m.end():].strip())


class Pipeline:
    def __init__(self, ruleset: RuleSet | None = None, *, rules_dir: Path | str | None = None,
                 overlay: Path | str | None | EllipsisType = ...) -> None:
        """`overlay`: a site's rule files loaded beside `rules_dir`'s (`...`: $LOGDX_RULES_OVERLAY)."""
        self.ruleset = ruleset if ruleset is not None else load_rules(rules_dir, overlay=overlay)

    def compress(self, source: Source, *, on_progress: Callable[[int], None] | None = None,
                 workers: int | None = None, limits: Limits | None = None) -> CompressedLog:
        """`workers`: processes for large plain files (default one per CPU; 1 = this process).
        `limits`: deadline and decompression-ratio bounds (a partial result with a warning)."""
        return compress_source(source, self.ruleset, on_progress=on_progress, workers=workers, limits=limits)

    def diagnose(self, source: Source, *, on_progress: Callable[[int], None] | None = None,
                 workers: int | None = None, limits: Limits | None = None,
                 job: JobPlacement | None = None) -> DiagnosisResult:
        """`job`: the registered job's hosts and GPU count, to name the host of a suspect rank."""
        return self.diagnose_compressed(self.compress(source, on_progress=on_progress, workers=workers,
                                                      limits=limits), job=job, source=source)

    def diagnose_compressed(self, log: CompressedLog, *, job: JobPlacement | None = None,
                            source: Source | None = None) -> DiagnosisResult:
        """`source`: the log file again, when it can be re-read: a loss spike's or non-finite
        loss's onset is then found exactly (app/core/onset.py), not at the next sampled line."""
        exceptions = ExceptionView(log, self.ruleset) if ablation.enabled("exceptions") else None
        events = events_from_log(log, exceptions)
        harmless = exceptions.harmless_lines() if exceptions is not None else frozenset()
        ranking = rank_events(events, log, harmless=harmless)
        if source is not None and refine_onset(source, self.ruleset, ranking.root_event, log.signal_shapes):
            events.sort(key=lambda e: e.first_line)
            ranking = rank_events(events, log, harmless=harmless)
        if ablation.enabled("subsystems"):
            ranking = by_vocabulary(ranking, events, log, vocabulary_of(self.ruleset), harmless)
        if (job is not None and job.stopped and ranking.root_event is None and (p := log.last_progress) is not None
                and ranking.root.rule_id == ENDS_ON_STEP):
            # the log ends on a training step and the scheduler says the job stopped unfinished
            ranking = replace(ranking, root=stalled_root(p, job.stopped))
        frames: list[str] = []
        if exceptions is not None and ranking.root_event is not None:
            for o in ranking.root_event.occurrences[:50]:
                if (rec := exceptions.by_line.get(o.line)) is not None:
                    frames += [f for f in rec.frames if f not in frames]
        action = self.decide_action(ranking, log, job=job, events=events, frames=tuple(frames))
        diagnosis = Diagnosis(
            root_cause=ranking.root, co_occurring=ranking.co_occurring, action=action,
            decided_by=DecidedBy.RULES, compression=log.stats, last_progress=log.last_progress,
            versions=Versions(rules=self.ruleset.version, logdx=__version__),
            notes=list(log.stats.warnings))
        # the log's secrets stay in the log: whoever may read a diagnosis need not see them
        diagnosis = redact_obj(diagnosis)
        return DiagnosisResult(diagnosis, log, events, ranking, job, harmless)

    def decide_action(self, ranking: Ranking, log: CompressedLog, *, job: JobPlacement | None = None,
                      events: list[ErrorEvent] | None = None, frames: tuple[str, ...] = ()) -> Action:
        """`frames`: the traceback frames above the root cause's exception lines (`path:function`)."""
        root, ev = ranking.root, ranking.root_event
        ctx = PolicyContext(
            error_type=root.error_type, category=root.category, confidence=root.confidence,
            rule_action=ev.action if ev else None, rule_id=ev.rule_id if ev else None,
            event_ranks=frozenset(ev.ranks) if ev else frozenset(),
            known_ranks=frozenset(log.known_ranks),
            hosts=tuple(sorted(ev.hosts)) if ev else (),
            spike_step_index=ev.spike_index if ev else None,
            only_symptoms=ranking.only_symptoms, preceding=_preceding(log, ev),
            root_lines=tuple(o.text for o in ev.occurrences[:50]) if ev else (),
            trained_before=ev is not None and (
                any(p.line < ev.first_line for p in log.recent_progress)
                or any(m.line < ev.first_line for m in log.metrics[:1])
                or _bar_before_error(ev.occurrences[0].text if ev.occurrences else ev.text)),
            root_frames=frames,
            loopback_interface=root.error_type is ErrorType.NetworkError
            and uses_loopback_interface(t.text for t in log.templates))
        decision = decide(ctx, self.ruleset.policies)
        hosts: list[str] = []
        ranks: list[int] = []
        if decision.kind is ActionKind.ISOLATE_AND_RESTART and ev is not None:
            first = [o.host for o in ev.occurrences if o.host]
            hosts = sorted(set(first)) if first else sorted(ev.hosts)
            ranks = sorted({o.rank for o in ev.occurrences if o.rank is not None})
        elif decision.policy_id == "nccl-timeout-silent-rank":
            ranks = silent_ranks(ctx)
        family = family_of(root.error_type.value)
        placed = ev is not None and ablation.enabled("hosts") and (
            root.category is Category.INFRASTRUCTURE or family in PLACED_FAMILIES)
        if placed:
            # where an infrastructure fault lies, most likely first, whatever the action: only an
            # isolate drains (after the probe), a retry's hosts count towards repeat offenders
            # (infrastructure only, app/controller/recovery.py); a GPU, network or node error of
            # another class (a CUDA set-up error, an RDMA registration refused) is still seen on a
            # host the engineer looks at first
            isolate = decision.kind is ActionKind.ISOLATE_AND_RESTART
            hosts = ranked_suspect_hosts(ev, printers=None if isolate else 2)
            if not hosts and not isolate and family == "gpu":
                # a GPU fault is the printing rank's own device: the hosts of those ranks, where
                # the log maps ranks to hosts (an isolate maps its suspect ranks in name_hosts);
                # as for printers, an error on more than two hosts points at none of them (a
                # collective timeout, printed by the survivors, never names them)
                mapped = sorted({log.rank_hosts[o.rank] for o in ev.occurrences if o.rank in log.rank_hosts})
                hosts = mapped if len(mapped) <= 2 else []
            if not hosts:  # a multi-line message names the other end below its first line
                hosts = block_hosts(ev, log)
            if not hosts:  # "remote process exited or network error": the IB error beside it names the peer
                others = [e for e in events or () if e is not ev and e.category is Category.INFRASTRUCTURE]
                for other in sorted(others, key=lambda e: e.first_line):
                    hosts += [h for h in ranked_suspect_hosts(other, printers=0) if h not in hosts]
        reason = decision.reason
        if ranks and decision.policy_id == "nccl-timeout-silent-rank":
            reason += f" Silent rank(s): {', '.join(map(str, ranks))}."
        action = Action(kind=decision.kind, suspect_hosts=hosts[:32], suspect_ranks=ranks[:64], reason=reason)
        session = session_host(log.templates, ev.first_line) if ev is not None else None
        # a GPU fault is the reporting process's own GPU: in one host's log, that host (a node
        # loss is reported by the survivors, so never the printing host, unless the message names
        # the lost GPU by its bus id: a GPU gone from the host that printed it, or is the host's
        # report about itself: its rule's `on_printer`, a VM's own preemption notice)
        printers = {h for h in log.known_hosts if h.lower() not in PLACEHOLDER_HOSTS}
        local = family == "gpu" or (ev is not None and (bool(ev.gpus) or ev.on_printer))
        sole = next(iter(printers)) if len(printers) == 1 and local else None
        allocated = (allocated_host(log.templates) if (action.kind is ActionKind.ISOLATE_AND_RESTART or placed)
                     and not action.suspect_hosts and ablation.enabled("hosts") else None)
        return name_hosts(action, rank_hosts=log.rank_hosts, job=job, session=session, sole_host=sole,
                          allocated=allocated, placed=placed)
