"""Diagnose: pick the root cause among co-occurring error events and label the rest.

The root cause is the earliest event of the most causal class: events whose role is `cause`
beat `wrapper`s (generic re-raises), which beat `symptom`s (collective timeouts, elastic
summaries, SIGTERM to peers, "remote process exited"); within a role the higher rule priority
(specificity: hardware > specific library failures > generic exceptions) wins, then the earlier
line. An exception raised while handling / because of an earlier one is demoted to wrapper; a
network error shortly after another rank died is a symptom of that death; an error after which
training kept making progress is `recovered` and ranks below everything else; so is an error
before a completion marker (training finished normally). With no (or only recovered) events: a
completion marker or output without training progress is "no failure found" (`Unknown`,
investigate, low confidence): nothing in the log shows a stall. Progress that stops without a
completion marker, followed by output whose time stamps cover ten minutes or more, means the job
hung; a log that ends on its last step, or a few lines after it without such time stamps, shows
no stall by itself (an excerpt of a healthy run ends so), and how the job ended decides
(`stopped_on_progress`: the scheduler's time limit, the live watch's stall clock). Otherwise
the first error-looking line becomes an `Unknown` root cause with low confidence; a launcher
summary alone is `Unknown` too.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, replace

import regex

from app.core import ablation, regexcache, timestamps
from app.core.compressed import BINARY_TEXT, CompressedLog, Occurrence
from app.core.events import RETRY_LOOKAHEAD, ErrorEvent, glog_not_error, kept_lines_by_number
from app.core.fields import extract_host, extract_rank
from app.core.subsystems import FRAMES_CONFIDENCE, VOCABULARY_CONFIDENCE
from app.core.types import (
    ActionKind, Category, CoOccurring, Diagnosis, ErrorType, Evidence, Progress, Role, RootCause, default_category,
    family_of,
)

_ROLE_ORDER = {Role.CAUSE: 2, Role.WRAPPER: 1, Role.SYMPTOM: 0}
GENERIC_PRIORITY = 50
WEAK_PRIORITY = 25  # a rule at or under it reads a weak cause: any other error of the run outranks it
MAX_EVIDENCE = 5


@dataclass
class Ranking:
    root: RootCause
    root_event: ErrorEvent | None
    co_occurring: list[CoOccurring]
    only_symptoms: bool
    # the log shows a failure no rule typed (error-looking lines, an untyped error event, a
    # launcher's summary alone) or only a rule's reading of last resort: the subsystem vocabulary
    # may name its family
    untyped: bool = False


def _untyped(ev: ErrorEvent) -> bool:
    """No rule typed the event, or only a rule of last resort did: the subsystem vocabulary may
    read it (`by_vocabulary`)."""
    return ev.error_type is ErrorType.Unknown or ev.last_resort


def effective_role(ev: ErrorEvent) -> Role:
    if ev.peer_consequence or ev.aborted_by_exception:
        return Role.SYMPTOM
    if ev.role is Role.CAUSE and ev.chained and ev.priority <= GENERIC_PRIORITY:
        return Role.WRAPPER
    if ev.role is Role.CAUSE and ev.error_type is ErrorType.Unknown:
        return Role.WRAPPER
    return ev.role


def _key(ev: ErrorEvent) -> tuple:
    # a recovered event ranks below every symptom: training went on after it; a Python warning
    # (the program went on) ranks below every error, above recovered ones
    tier = -2 if ev.recovered else (-1 if ev.warning else _ROLE_ORDER[effective_role(ev)])
    return (tier, ev.priority, -ev.first_line)


def _evidence(ev: ErrorEvent) -> list[Evidence]:
    out, seen = [], set()
    for occ in ev.occurrences:
        if occ.text in seen:
            continue
        seen.add(occ.text)
        out.append(Evidence(line=occ.line, text=occ.text[:2000], rank=occ.rank, host=occ.host))
        if len(out) >= MAX_EVIDENCE:
            break
    if not out:
        out.append(Evidence(line=ev.first_line, text=ev.text[:2000], rank=ev.first_rank, host=ev.first_host))
    return out


def _confidence(root: ErrorEvent, others: list[ErrorEvent]) -> float:
    role = effective_role(root)
    if role is Role.SYMPTOM:
        return 0.5
    if role is Role.WRAPPER:
        return 0.4 if root.error_type is not ErrorType.Unknown else 0.3
    conf = 0.6 + root.priority / 250
    rivals = [e for e in others if effective_role(e) is Role.CAUSE and e.error_type != root.error_type
              and e.priority >= root.priority - 5]
    if rivals:
        conf *= 0.75
    return round(min(conf, 0.99), 2)


def _explain(root: ErrorEvent, role: Role, n_symptoms: int) -> str:
    where = []
    if root.first_rank is not None:
        where.append(f"rank {root.first_rank}")
    if root.first_host:
        where.append(f"host {root.first_host}")
    loc = f" on {' / '.join(where)}" if where else ""
    parts = [f"{root.error_type.value} first seen at line {root.first_line}{loc} (rule {root.rule_id})."]
    if root.hint:
        parts.append(root.hint)
    if role is Role.SYMPTOM:
        parts.append("Only symptom-class errors were found; the real cause may be outside this log.")
    if n_symptoms:
        parts.append(f"{n_symptoms} other error type(s) are symptoms of it.")
    return " ".join(parts)


_PROCESS_FATAL = {ErrorType.OutOfMemoryError, ErrorType.HostOOMKilled}
_PEER_VISIBLE = {ErrorType.NetworkError, ErrorType.NCCLRemoteError}
PEER_WINDOW_LINES = 5000


def mark_peer_consequences(events: list[ErrorEvent]) -> None:
    """A rank that dies (OOM, user-code exception) drops its connections; its peers then report
    IB retry-exceeded, socket resets or NCCL system errors, often with a higher rule priority
    than the death itself. Such a network event is a symptom when a process-fatal cause on other
    (or unknown) ranks came shortly before it, unless its rule names it a local hardware fault
    (isolate_and_restart, e.g. an IB port error on this node) or a set-up error no peer's death
    causes (no_retry: no usable interface, an RDMA registration refused; NCCL prints it under
    `Last error:` of the generic error it explains)."""
    # (a line its emitter printed at warning level is not a process that died, nor a weak cause,
    # a reading any later error of the run outranks: c10d's port already taken, after which the
    # elastic agent may go on as a client)
    fatal = [e for e in events if effective_role(e) is Role.CAUSE and e.error_type not in _PEER_VISIBLE
             and not e.leveled_warning and not e.warning and e.priority > WEAK_PRIORITY
             and (e.error_type in _PROCESS_FATAL or e.category in (Category.FRAMEWORK, Category.SCRIPT))]
    for ev in events:
        if ev.error_type not in _PEER_VISIBLE or effective_role(ev) is not Role.CAUSE \
                or ev.action in (ActionKind.ISOLATE_AND_RESTART, ActionKind.NO_RETRY):
            continue
        ev.peer_consequence = any(
            f.first_line < ev.first_line <= f.first_line + PEER_WINDOW_LINES
            and (not f.ranks or not ev.ranks or not f.ranks & ev.ranks) for f in fatal)


RECOVERY_MARKERS = 3


def recovered_before(log: CompressedLog) -> int:
    """Errors whose last line is before this line did not stop the job (a handled exception, a
    retried upload, a warning): at least RECOVERY_MARKERS progress markers, on at least two
    different steps when steps are known, follow them. 0 when training did not go on."""
    recent = log.recent_progress[-RECOVERY_MARKERS:]
    if len(recent) < RECOVERY_MARKERS:
        return 0
    steps = {p.step for p in recent if p.step is not None}
    if len(steps) == 1:  # the same step printed by several ranks is not progress
        return 0
    return recent[0].line


def survived_before(log: CompressedLog) -> int:
    """Errors whose last line is before this line did not stop the job: training went on after
    them, or the run finished normally (a completion marker) after them."""
    before = recovered_before(log)
    if log.completed is not None:
        before = max(before, log.completed.line)
    return before


# (a loss term's key too: `loss_bbox: nan`, then `loss_bbox: 0.31` once the scaler skipped the step)
_NONFINITE_KEY = regexcache.compile(r"(?i)\b((?:[a-z]+[_ ])?(?:loss(?:_[a-z]+){0,2}|grad[_ ]norm))'?\s*(?:[:=]\s*|\s+)(?:tensor\()?[-+]?(?:nan|inf)\b")


# a loss printed with a finite value other than zero (`loss: 2.5128`; a loss of exactly 0 is a
# collapse, not health)
_LIVE_LOSS = regexcache.compile(r"(?i)\bloss'?\s*(?:[:=]\s*|\s+)(?:tensor\()?[-+]?(?:0*[1-9]\d*(?:\.\d*)?|0*\.\d*[1-9])")


# ... unless the trainer's own counter on the line says it skipped nothing (Megatron's `number of
# skipped iterations:   0` beside `grad norm: nan`: the update was applied)
_NONE_SKIPPED = regexcache.compile(r"(?i)\bskipped[ _]iter(?:ation)?s?\b\s*[:=]\s*0\b")


def _finite_again(ev: ErrorEvent, log: CompressedLog) -> bool:
    """A later line prints the quantity that was nan/inf (same key) with a finite value; or the
    quantity is a grad norm printed beside a live loss on every line that has it, and the loss
    is still live on a later line (mixed precision's scaler skipped the steps the norm overflowed
    on: the loss goes on), unless the line's own counter says no iteration was skipped."""
    m = _NONFINITE_KEY.search(ev.text)
    if m is None:
        return False
    finite = regex.compile(regex.escape(m.group(1)) + r"'?\s*(?:[:=]\s*|\s+)(?:tensor\()?[-+]?\d", regex.I)
    if any(finite.search(text) for text in _kept_after(log, ev.last_line)):
        return True
    key = m.group(1).lower()
    if "grad" not in key or "loss" in key or any(_NONE_SKIPPED.search(o.text) for o in ev.occurrences):
        return False
    return all(_LIVE_LOSS.search(o.text) for o in ev.occurrences) and any(
        _LIVE_LOSS.search(text) for text in _kept_after(log, ev.first_line))


def _kept_after(log: CompressedLog, line: int) -> list[str]:
    """The kept lines after `line` that the compressor can give back by number."""
    return [text for n, text in kept_lines_by_number(log).items() if n > line]


# the trainer's own guard says it dropped that update (espnet `The grad norm is nan. Skipping
# updating the model.` / `Do not update model.`, DeepSpeed `OVERFLOW! Rank 0 Skipping step.`)
_SKIP_NOTICE = regexcache.compile(r"(?i)\bskip(?:ping|ped)?\b[^\n]{0,40}\b(?:step|update|updating|batch|iteration)|\bdo not update\b")
# ... but not a counter field of a metrics line (Megatron's `number of skipped iterations:   1`)
_SKIP_COUNTER = regexcache.compile(r"(?i)\bskipped[ _]iter(?:ation)?s?\b\s*[:=]")


def _guarded_skip(ev: ErrorEvent, last_output: int) -> bool:
    """One non-finite value on a line that says its update was skipped, with output after it (the
    log's last output line is later): the guard did its job (a run stuck on non-finite values
    prints the notice again and again)."""
    return (ev.count == 1 and bool(_SKIP_NOTICE.search(_SKIP_COUNTER.sub("", ev.text)))
            and last_output > ev.last_line)


# how far from a client's giving-up message the error it gave up on is printed: before it, its
# retries' warnings (huggingface_hub's `'(MaxRetryError(...))' thrown while requesting HEAD ...`,
# then `Retrying in 1s`); after it, the traceback of the failed connection a server's summary line
# (`!!! Exception during processing !!! We couldn't connect ...`) is printed above
GIVE_UP_WINDOW = 30


def mark_give_ups(events: list[ErrorEvent]) -> None:
    """A client that gives up prints a message that reads the same whatever made it give up
    (transformers' "We couldn't connect to 'https://huggingface.co' to load this file" in offline
    mode, with nothing else in the log, and after its connection attempts failed): with an error of
    a type its rule names (`gives_up_after`) printed within GIVE_UP_WINDOW lines, that error is
    the cause (not recovered though the client retried it: the retries are what failed) and the
    giving-up message is its wrapper."""
    for g in events:
        if not g.gives_up_after:
            continue
        near = [e for e in events if e is not g and e.error_type in g.gives_up_after
                and abs(e.first_line - g.first_line) <= GIVE_UP_WINDOW]
        if near:
            g.role = Role.WRAPPER
            for e in near:
                e.gave_up_on = True


def mark_recovered(events: list[ErrorEvent], log: CompressedLog) -> None:
    before = survived_before(log)
    # (one pass over the templates, only when a retried error or a metric NaN needs it)
    # (a client's retry notice whose exception's backtrace ends the log still ends it in the loop)
    last_output = _last_output_line(log, messages_only=True) if any(
        ev.retried or (ev.rule_id.startswith("metrics.") and ev.error_type is ErrorType.NaNLoss)
        for ev in events) else 0
    for ev in events:
        # a non-finite loss is not cured by more steps: training "going on" with nan is the fault,
        # unless the same quantity is finite again later (an fp16 step the loss scaler skipped); a
        # value read from a metric line, also when a lone one was skipped by the trainer's guard
        # (the loss-scale rules' own skip notices are theirs to judge: a scale at its floor fails)
        if ev.error_type is ErrorType.NaNLoss and not ev.rule_id.startswith("metrics."):
            ev.recovered = _finite_again(ev, log)
            continue
        if ev.rule_id.startswith("metrics."):
            ev.recovered = ev.error_type is ErrorType.NaNLoss and _guarded_skip(ev, last_output)
            continue
        # (a client that gave up on it says its retries failed, mark_give_ups; training that went
        # on after both still makes it recovered)
        if ev.last_line < before or (ev.retried and not ev.gave_up_on
                                     and not _retries_failed(ev, events, last_output)) \
                or _tolerated(ev, log):
            ev.recovered = True


# what more training does not cure: the stall itself, a loss that went bad
_NOT_TOLERABLE = {ErrorType.Hang, ErrorType.NaNLoss, ErrorType.LossSpike}


def _tolerated(ev: ErrorEvent, log: CompressedLog) -> bool:
    """The same error came back with training progress between its occurrences (progress markers
    on at least two different steps after its first line and before its last): the job lived
    through it each time, so its last occurrence, also where the log ends on it, is no more the
    failure than the earlier ones (a metrics service answering 500 between steps). An error that
    recurs only once training stopped is not this."""
    if ev.count < 2 or ev.error_type in _NOT_TOLERABLE or not ablation.enabled("timing"):
        return False
    between = [p for p in log.recent_progress if ev.first_line < p.line < ev.last_line]
    steps = {p.step for p in between if p.step is not None}
    return len(between) >= 2 and len(steps) >= 2


def _retries_failed(ev: ErrorEvent, events: list[ErrorEvent], last_output: int) -> bool:
    """A retried request is handled by its client, unless the retries never got through: the log
    ends in the retry loop (its last output is the error and the client's notices, with no failure
    of another family after them), or the client gives up right after it with an error of the same
    family (`Network error (ConnectTimeout), entering retry loop`, then `Run initialization has
    timed out`)."""
    end = ev.last_line + RETRY_LOOKAHEAD
    family = family_of(ev.error_type)
    if last_output <= end:
        # the last output is the loop's, unless another failure was printed after the notice
        # (a data error raised once the retried request got through; a warning no rule types,
        # Unknown, is no such failure: NCCL's `Connect to` cut short after its own retries)
        return not any(e is not ev and e.first_line > ev.last_line and family_of(e.error_type) != family
                       and e.error_type is not ErrorType.Unknown for e in events)
    # (a retried error of the family is the client's next attempt, not its giving up)
    return any(e is not ev and ev.last_line < e.first_line <= end and family_of(e.error_type) == family
               and not e.retried for e in events)


def _wrapped_teardown(events: list[ErrorEvent]) -> None:
    """A wrapper printed once takes the state of the message it carries, on its next two lines
    (`terminate called after throwing an instance of 'c10::CUDAError'` over `what():  CUDA error:
    driver shutting down`) or else on its previous two (TensorFlow's `Error polling for event
    status: ... CUDA_ERROR_DEINITIALIZED` under `F ... Unexpected Event status: 1`): of a teardown
    symptom it is that teardown, the process aborting while it exited; of a recovered error it
    is recovered."""
    def carries(ev: ErrorEvent, e: ErrorEvent) -> bool:
        # (another one-line wrapper is no message: PyTorch's note under `what(): CUDA error: ...`
        # wraps the same error as the `terminate called` above it)
        return e is not ev and not (e.role is Role.WRAPPER and e.count == 1 and not e.teardown_alone
                                    and not e.recovered)

    for ev in events:
        if ev.role not in (Role.SYMPTOM, Role.WRAPPER) or ev.count != 1 or ev.recovered or ev.teardown_alone:
            continue
        carried = [e for e in events if carries(ev, e) and 0 < e.first_line - ev.first_line <= 2] or [
            e for e in events if carries(ev, e) and 0 < ev.first_line - e.first_line <= 2]
        if carried and all(e.teardown_alone for e in carried):
            ev.teardown_alone = True
        elif carried and all(e.recovered for e in carried):
            ev.recovered = True


# an abort (SIGABRT) as Python's fault handler or the shell reports it
_ABORT = regexcache.compile(r"Fatal Python error: Aborted|^\s*Aborted(?: \(core dumped\))?\s*$|\bline \d+: +\d+ Aborted\b")
# the C++ runtime's report of an exception nothing caught, which then calls abort()
TERMINATE_RULE = "cpp-terminate-wrapper"
# its second line, the exception's message: `  what():  [Rank 4] Watchdog caught collective ...`
_WHAT = regexcache.compile(r"(?:^|\s)what\(\): ")
ABORT_AFTER_TERMINATE_LINES = 8


def mark_aborts_by_exception(events: list[ErrorEvent]) -> None:
    """libstdc++ reports an exception nothing caught (`terminate called after throwing an instance
    of 'gloo::IoException'`, its message on the `what():` line) and then calls abort(): the
    process's `Fatal Python error: Aborted` / `Aborted (core dumped)` a few lines later is that
    exception's consequence. An untyped abort whose every line follows such a report, with a typed
    event on the lines between (the message a rule knows), is a symptom: it does not outrank the
    message it carries; so is one that follows a typed `what():` line alone (the report's first
    line cut off, or printed to the other stream). An abort with no report before it, or whose
    message no rule types, stays."""
    reports = sorted(o.line for e in events if e.rule_id == TERMINATE_RULE for o in e.occurrences)
    typed_occ = [o for e in events if e.error_type is not ErrorType.Unknown and e.rule_id != TERMINATE_RULE
                 for o in e.occurrences]
    typed = sorted(o.line for o in typed_occ)
    # a typed message on the report's own `what():` line (the report's first line is cut off or
    # was printed to the other stream)
    messages = sorted(o.line for o in typed_occ if _WHAT.search(o.text))
    if not reports and not messages:
        return

    def carried(line: int) -> bool:
        # a report within the window before the abort, with a typed line between the two
        lo = bisect.bisect_left(reports, line - ABORT_AFTER_TERMINATE_LINES)
        for r in reports[lo:bisect.bisect_left(reports, line)]:
            i = bisect.bisect_right(typed, r)
            if i < len(typed) and typed[i] < line:
                return True
        i = bisect.bisect_left(messages, line - ABORT_AFTER_TERMINATE_LINES)
        return i < len(messages) and messages[i] < line

    for ev in events:
        if ev.error_type is not ErrorType.Unknown or ev.role is not Role.CAUSE:
            continue
        lines = [o.line for o in ev.occurrences if _ABORT.search(o.text)]
        if lines and len(lines) == len(ev.occurrences):
            ev.aborted_by_exception = all(carried(line) for line in lines)


def _warned_and_went_on(live: list[ErrorEvent], log: CompressedLog, harmless: frozenset[int]) -> bool:
    """Every error was printed at warning or info severity by an emitter that has an error level
    (glog / c10: `W tensorflow/...] Could not load dynamic library ...`) and no other error-looking
    line (a traceback, an E or F line) follows: the emitter went on, the log shows no failure (a
    stall warning is how a stall shows: not this)."""
    if not all(ev.leveled_warning and ev.error_type is not ErrorType.Hang for ev in live):
        return False
    first = min(ev.first_line for ev in live)
    return not any(line >= first and line not in harmless and not glog_not_error(text)
                   for line, text in log.flagged_lines)


def rank_events(events: list[ErrorEvent], log: CompressedLog, *, harmless: frozenset[int] = frozenset()) -> Ranking:
    """`harmless`: lines of tracebacks printed at teardown or ignored (app/core/exceptions.py),
    which are not error-looking lines of a log with no failure."""
    if not events:
        return _no_events(log, harmless)
    mark_give_ups(events)
    mark_recovered(events, log)
    mark_peer_consequences(events)
    if ablation.enabled("exceptions"):
        mark_aborts_by_exception(events)
    _wrapped_teardown(events)
    # (an NCCL warning no rule types, `Unknown`, says nothing either way)
    live = [ev for ev in events if not ev.recovered
            and not (ev.error_type is ErrorType.Unknown and ev.role is Role.SYMPTOM)]
    if live and all(ev.teardown_alone for ev in live):
        # only what the communicators print while the processes exit (NCCL's proxy thread losing
        # its local connections), with no process's own error: the log shows no failure
        for ev in live:
            ev.recovered = True
    elif live and ablation.enabled("severity") and _warned_and_went_on(live, log, harmless):
        for ev in live:
            ev.recovered = True
    root = max(events, key=_key)
    if root.recovered:  # every error was followed by more training: the job stalled later
        return _stalled_after_recovered(events, log, harmless)
    role = effective_role(root)
    co: list[CoOccurring] = []
    n_symptoms = 0
    for ev in events:
        if ev is root:
            continue
        r = effective_role(ev)
        if ev.recovered:
            label = "recovered"
        elif r is Role.WRAPPER:
            label = "wrapper"
        elif r is Role.SYMPTOM:
            label = "symptom"
        elif ev.first_line > root.first_line and (not ev.ranks or not root.ranks or ev.ranks & root.ranks
                                                   or ev.category is root.category):
            label = "symptom"
        else:
            label = "independent"
        if label == "symptom":
            n_symptoms += 1
        co.append(_co(ev, label))
    if root.error_type is ErrorType.ChildFailedError:
        return _launcher_summary_only(root, co)
    rc = RootCause(
        error_type=root.error_type, category=root.category, confidence=_confidence(root, events),
        evidence=_evidence(root), explanation=_explain(root, role, n_symptoms), rule_id=root.rule_id,
        gpu=next(iter(sorted(root.gpus)), None), xid=next(iter(sorted(root.xids)), None),
        onset_step=root.onset_step, last_good_step=root.last_good_step)
    return Ranking(rc, root, co, only_symptoms=role is Role.SYMPTOM,
                   untyped=_untyped(root) and role is not Role.SYMPTOM)


def by_vocabulary(ranking: Ranking, events: list[ErrorEvent], log: CompressedLog, vocabulary,
                  harmless: frozenset[int] = frozenset()) -> Ranking:
    """A failure no rule typed (or typed only by a rule of last resort), named by the subsystem
    vocabulary (app/core/subsystems.py): its error-looking lines the job did not survive and the
    lines of its untyped (or last-resort) error events (not an untyped symptom's: an NCCL warning
    no rule knows), read for a subsystem and a failure; failing that, or where no failure was found
    at all, a traceback the log ends in, cut before its exception line, read by its frames. The
    ranking unchanged when none names one."""
    if not ranking.untyped and not _cut_open(ranking, log):
        return ranking
    nearby = kept_lines_by_number(log)
    typed = None
    if ranking.untyped:
        before = survived_before(log)
        lines = [(ln, t) for ln, t in log.flagged_lines if ln >= before and ln not in harmless]
        for ev in events:
            if _untyped(ev) and not ev.recovered and effective_role(ev) is not Role.SYMPTOM:
                lines += [(o.line, o.text) for o in ev.occurrences if o.line not in harmless]
        typed = vocabulary.type_lines(lines, nearby)
    by_frames = typed is None
    if by_frames:
        # a traceback the log ends in, cut before its exception line: its frames name the client
        tail = {**{t.last_line: t.last_line_text for t in log.templates if t.text != BINARY_TEXT}, **nearby}
        typed = vocabulary.type_cut_traceback(tail, _last_output_line(log))
        if typed is not None and typed.line in harmless:
            typed = None
    if typed is None:
        return ranking
    # its line as an event of its own (no rule): where the line was printed and the hosts it
    # names place it as a rule's occurrence would be placed
    occ = Occurrence(line=typed.line, text=typed.text, rule=None, groups={}, rank=extract_rank(typed.text),
                     host=extract_host(typed.text))
    ev = ErrorEvent(
        id="", error_type=typed.error_type, category=default_category(typed.error_type), role=Role.CAUSE,
        priority=typed.priority, rule_id=typed.rule_id, first_line=typed.line, count=1, text=typed.text,
        occurrences=[occ], hint=typed.hint, first_rank=occ.rank, first_host=occ.host, last_line=typed.line)
    if occ.rank is not None:
        ev.ranks.add(occ.rank)
    if occ.host:
        ev.hosts.add(occ.host)
    if by_frames:
        why = (f"No rule matched and the log ends in a traceback cut before its error line; its frame at line "
               f"{typed.line} is in a client the subsystem vocabulary knows (rule {typed.rule_id}), so the failure "
               f"is read as {typed.error_type.value}: the call that failed, not its message.")
    else:
        why = (f"No rule matched this failure; line {typed.line} names a subsystem and a failure, so it is read "
               f"as {typed.error_type.value} by the subsystem vocabulary (rule {typed.rule_id}), not by a rule "
               "for this message: too weak to act on, a human should confirm.")
    rc = RootCause(
        error_type=typed.error_type, category=default_category(typed.error_type),
        confidence=FRAMES_CONFIDENCE if by_frames else VOCABULARY_CONFIDENCE,
        evidence=[Evidence(line=typed.line, text=typed.text[:2000])],
        explanation=why + (f" {typed.hint}" if typed.hint else ""), rule_id=typed.rule_id)
    return Ranking(rc, ev, ranking.co_occurring, only_symptoms=False)


def _cut_open(ranking: Ranking, log: CompressedLog) -> bool:
    """No failure was found and none is explained away: no error event, no finished run, no
    training that went on to the end; what the log ends in may still say what failed."""
    return (ranking.root_event is None and ranking.root.error_type is ErrorType.Unknown
            and ranking.root.rule_id is None and log.completed is None)


def _launcher_summary_only(summary: ErrorEvent, co: list[CoOccurring]) -> Ranking:
    """Only the launcher's "child failed" summary is in the log: the failing rank's own error is
    elsewhere, so the root cause is Unknown (not a canonical type), with the summary as evidence."""
    co.insert(0, _co(summary, "symptom"))
    rc = RootCause(
        error_type=ErrorType.Unknown, category=Category.UNKNOWN, confidence=0.3,
        evidence=_evidence(summary),
        explanation=(f"Only the launcher's failure summary is in this log (line {summary.first_line}); the "
                     "failing rank's own error is not. Read that rank's output or its error_file."),
        rule_id=summary.rule_id)
    return Ranking(rc, None, co, only_symptoms=True, untyped=True)


def _co(ev: ErrorEvent, role: str) -> CoOccurring:
    return CoOccurring(error_type=ev.error_type, role=role, count=ev.count, first_line=ev.first_line,
                       rule_id=ev.rule_id, ranks=sorted(ev.ranks)[:64], hosts=sorted(ev.hosts)[:64])


def _stalled_after_recovered(events: list[ErrorEvent], log: CompressedLog,
                             harmless: frozenset[int] = frozenset()) -> Ranking:
    hang = _no_events(log, harmless)
    hang.co_occurring.extend(_co(ev, "recovered") for ev in events)
    hang.root.explanation += (f" {len(events)} earlier error type(s) were followed by more training, or printed at "
                              "teardown (recovered).")
    return hang


NO_FAILURE_CONFIDENCE = 0.2


# the pseudo rule id of "no failure found: training progressed up to the log's last line" (like
# `metrics.nan-loss`, it names how the answer was reached): how the job ended decides the rest
ENDS_ON_STEP = "progress.ends-on-step"


def _no_failure(why: str, evidence: list[Evidence], rule_id: str | None = None) -> Ranking:
    """A run the log does not show failing: not a diagnosis of a fault, so no failure type and a
    low confidence; the action falls to `investigate` (look outside the log if the job did fail)."""
    rc = RootCause(
        error_type=ErrorType.Unknown, category=Category.UNKNOWN, confidence=NO_FAILURE_CONFIDENCE,
        evidence=evidence, explanation=f"no failure found: {why}", rule_id=rule_id)
    return Ranking(rc, None, [], only_symptoms=False)


def _no_events(log: CompressedLog, harmless: frozenset[int] = frozenset()) -> Ranking:
    before = survived_before(log)
    # error-looking lines training did not survive, other than harmless (teardown) tracebacks
    flagged = [f for f in log.flagged_lines if f[0] >= before and f[0] not in harmless]
    if flagged:
        line, text = flagged[0]
        rc = RootCause(
            error_type=ErrorType.Unknown, category=Category.UNKNOWN, confidence=0.2,
            evidence=[Evidence(line=ln, text=t[:2000]) for ln, t in flagged[:MAX_EVIDENCE]],
            explanation=f"No rule matched; the first error-looking line is line {line}.")
        return Ranking(rc, None, [], only_symptoms=False, untyped=True)
    if log.cut_short:  # a stall is read from the end of the log, which was not reached
        rc = RootCause(
            error_type=ErrorType.Unknown, category=Category.UNKNOWN, confidence=0.1, evidence=[],
            explanation=("No error in the part of the log that was read; reading stopped before the end "
                         "(a limit, or a truncated or corrupt archive: see the notes), so neither the failure "
                         "nor a stall can be told."))
        return Ranking(rc, None, [], only_symptoms=False)
    if (done := log.completed) is not None:
        return _no_failure(
            f"training finished normally (line {done.line}: {(done.text or '').strip()[:200]}) and no error "
            "follows. If the job did not exit after this, it hung in shutdown (take stack dumps).",
            [Evidence(line=done.line, text=(done.text or "")[:2000])])
    last_output = _last_output_line(log)
    last_step = _last_training_activity(log)
    if last_step is not None and last_output <= last_step.line and (
            log.inferred_progress or ablation.enabled("stall")):
        # a stall must show in the log: a stall warning, a stack dump or a time-limit kill (events,
        # not here), or output after the last step whose time stamps cover STALL_SECONDS (below).
        # A log that ends on a step line shows training going on; whether it then stopped is not
        # in the log but in the job's end (the scheduler's time limit, the live watch's clock: the
        # controller reads a stopped job's log that ends on progress as a Hang,
        # app/controller/service.py)
        p = last_step
        return _no_failure(
            f"training progressed up to the log's last line ({p.line}"
            + (f", step {p.step}" if p.step is not None else "")
            + ") and nothing after it shows a stall. If the job was stopped for making no progress, "
            "take stack dumps.", [Evidence(line=p.line, text=(p.text or "")[:2000])], rule_id=ENDS_ON_STEP)
    if last_step is not None and ablation.enabled("stall") and (
            (span := _span_after_last_step(log, last_step)) is None or span < STALL_SECONDS):
        # output after the last step, but nothing shows that it lasted: no time stamps, or they
        # cover too little. An excerpt that ends while an eval starts, a checkpoint is saved or a
        # loss scale drops reads the same as a job that stopped there; how the job ended tells
        # them apart (as for a log that ends on a step line)
        p = last_step
        covered = "carry no time stamps" if span is None else f"cover {span:.0f} s"
        return _no_failure(
            f"training progressed up to line {p.line}" + (f" (step {p.step})" if p.step is not None else "")
            + f"; the {last_output - p.line} line(s) after it show no error and {covered}, which does "
            "not show a stall. If the job was stopped for making no progress, take stack dumps.",
            [Evidence(line=p.line, text=(p.text or "")[:2000])], rule_id=ENDS_ON_STEP)
    if last_step is not None:
        p = last_step
        rc = RootCause(
            error_type=ErrorType.Hang, category=Category.FRAMEWORK, confidence=0.6,
            evidence=[Evidence(line=p.line, text=(p.text or "")[:2000])],
            explanation=(f"No error in the log; the last progress marker is at line {p.line}"
                         + (f" (step {p.step})" if p.step is not None else "")
                         + (f", {log.stats.lines_in - p.line} line(s) before the end" if log.stats.lines_in > p.line else "")
                         + ". The job stopped making progress without an error."))
        return Ranking(rc, None, [], only_symptoms=False)
    text_lines = [t for t in log.templates if t.text != BINARY_TEXT]
    if text_lines:  # output, but no error and no training step: nothing shows that it stalled
        last = max(text_lines, key=lambda t: t.last_line)
        return _no_failure(
            f"no error and no training progress in the log; it ends at line {last.last_line}. If the job "
            "was stopped for making no progress, it stalled during start-up (initialisation, data loading, "
            "the first step): take stack dumps.",
            [Evidence(line=last.last_line, text=last.last_line_text[:2000])])
    rc = RootCause(
        error_type=ErrorType.Unknown, category=Category.UNKNOWN, confidence=0.1,
        evidence=[], explanation="No error and no training progress were found in the log.")
    return Ranking(rc, None, [], only_symptoms=False)


# how long the output after the last training step must last to show a stall, where its lines
# carry time stamps (the NCCL watchdog's default is 10 minutes)
STALL_SECONDS = 600.0


def _last_training_activity(log: CompressedLog) -> Progress | None:
    """The last progress marker, or a later line that reported a finite training loss (a metric
    point: `Mean training loss: 0.5204.` when an epoch ends after the `Training epoch: 28` marker
    it began with): training went on up to there, so a stall is measured from it."""
    p = log.last_progress
    if p is None:
        return None
    later = [m for m in log.metrics if m.line > p.line
             and any("loss" in k and math.isfinite(v) for k, v in m.values.items())]
    if not later:
        return p
    m = max(later, key=lambda m: m.line)
    return Progress(step=p.step, line=m.line, text=m.text or None)


def _span_after_last_step(log: CompressedLog, p: Progress) -> float | None:
    """Seconds the kept lines after the last step cover (app/core/timestamps.py), None when they
    carry no time stamps."""
    seen: dict[int, str] = dict(log.context)
    for t in log.templates:
        if t.text != BINARY_TEXT:
            seen.setdefault(t.first_line, t.text)
            seen.setdefault(t.last_line, t.last_line_text)
    seen[p.line] = p.text or seen.get(p.line, "")
    lines = sorted(seen)
    return timestamps.span_after([seen[n] for n in lines if n <= p.line], [seen[n] for n in lines if n > p.line])


# the C++ backtrace c10::Error appends to its message (`Exception raised from throwTimeoutError at
# .../socket.cpp:1021 (most recent call first):`, then `frame #0: ...`): the rest of the message
# printed above it, not output of the program after it
_CPP_BACKTRACE = regexcache.compile(
    r"^\s*(?:\[rank\d+\]:\s*)?(?:frame #\d+: |Exception raised from \S+ at \S+ \(most recent call first\):)")


def _last_output_line(log: CompressedLog, *, messages_only: bool = False) -> int:
    """The log's last line with text (blank lines and whitespace after the last step are no output).
    `messages_only`: a C++ backtrace that ends a message is that message (its last line is the
    message's, not more output)."""
    kept = [t.last_line for t in log.templates if t.text != BINARY_TEXT and t.last_line_text.strip()
            and not (messages_only and _CPP_BACKTRACE.search(t.last_line_text))]
    return max(kept, default=0)


def ends_on_progress(diagnosis: Diagnosis) -> bool:
    """The log shows no failure and ends on a training step: whether the run then stalled is not in
    the log but in how the job ended (`stopped_on_progress`)."""
    return (diagnosis.root_cause.error_type is ErrorType.Unknown and diagnosis.last_progress is not None
            and diagnosis.root_cause.rule_id == ENDS_ON_STEP)


def stalled_root(p: Progress, why: str) -> RootCause:
    """The root cause of a log that ends on the training step `p`, for a job known to have stopped
    without finishing (`why`): a Hang at that step."""
    return RootCause(
        error_type=ErrorType.Hang, category=Category.FRAMEWORK, confidence=0.6,
        evidence=[Evidence(line=p.line, text=(p.text or "")[:2000])],
        explanation=(f"No error in the log; it ends on the last progress marker (line {p.line}"
                     + (f", step {p.step}" if p.step is not None else "")
                     + f") and the job stopped without finishing ({why}): it stopped making progress "
                     "without an error."))


def stopped_on_progress(diagnosis: Diagnosis, why: str) -> Diagnosis:
    """The diagnosis of a log that ends on a training step, for a job known to have stopped without
    finishing (`why`: the scheduler's time limit or failure, the live watch's stall clock): a Hang
    at that step. Any other diagnosis is returned as it is."""
    if not ends_on_progress(diagnosis):
        return diagnosis
    assert diagnosis.last_progress is not None
    return replace(diagnosis, root_cause=stalled_root(diagnosis.last_progress, why))
