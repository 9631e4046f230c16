"""Typed error events: rule occurrences aggregated per rule, plus events derived from metrics."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from app.core import regexcache, signals
from app.core.compressed import CompressedLog, MetricPoint, Occurrence
from app.core.fields import fold_key
from app.core.types import ActionKind, Category, ErrorType, Role, default_category

NAN_PRIORITY = 70
SPIKE_PRIORITY = 45
# a spike: the loss at least doubles over the median of the points before it (and by more than
# SPIKE_MIN_JUMP) and does not come back; an LLM's loss late in pretraining moves by hundredths,
# and Megatron's 3.06, 3.11 -> 7.71 in one logging interval (2.497x the median) is a spike that
# a 2.5x factor missed
SPIKE_FACTOR = 2.0
SPIKE_MIN_JUMP = 1.0
SPIKE_WINDOW = 20
RECOVERED_FACTOR = 1.5


@dataclass
class ErrorEvent:
    """All lines one rule matched (or one metric finding), with the first as lead evidence."""

    id: str
    error_type: ErrorType
    category: Category
    role: Role
    priority: int
    rule_id: str
    first_line: int
    count: int
    text: str
    occurrences: list[Occurrence] = field(default_factory=list)
    ranks: set[int] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    gpus: set[str] = field(default_factory=set)
    xids: set[int] = field(default_factory=set)
    action: ActionKind | None = None
    hint: str | None = None
    chained: bool = False  # raised while handling / because of an earlier exception
    first_rank: int | None = None
    first_host: str | None = None
    spike_index: int | None = None
    # a loss spike / non-finite loss: the first step seen bad and the last step seen healthy
    # before it (the metric series is sampled, so the true onset lies in between)
    onset_step: int | None = None
    last_good_step: int | None = None
    last_good_line: int = 0  # line of that healthy point (where a re-read for the exact onset starts)
    baseline: float | None = None  # the loss median a spike is measured against
    peer_consequence: bool = False  # a network error caused by a peer process dying (see rank.py)
    aborted_by_exception: bool = False  # an abort an escaped C++ exception caused (see rank.py)
    recovered: bool = False  # training made progress after its last occurrence (see rank.py)
    last_line: int = 0
    warning: bool = False  # every line it matched is a Python warning (see rank.py)
    leveled_warning: bool = False  # every line it matched carries a glog/c10 W or I severity (see rank.py)
    retried: bool = False  # every line it matched is followed by a client's retry notice
    teardown_alone: bool = False  # its rule's `teardown_alone` (see rank.py)
    gives_up_after: frozenset[ErrorType] = frozenset()  # its rule's `gives_up_after` (see rank.py)
    gave_up_on: bool = False  # a client gave up after this error (rank.py `mark_give_ups`)
    last_resort: bool = False  # its rule's `last_resort` (see rank.py `by_vocabulary`)
    on_printer: bool = False  # its rule's `on_printer`: the fault is the printing host's own (pipeline.py)


def _canonical(name: str | None) -> ErrorType | None:
    if not name:
        return None
    short = name.rsplit(".", 1)[-1]
    try:
        return ErrorType(short)
    except ValueError:
        return None


_SUMMARY_HOST = regexcache.compile(r"^\s*host\s*:\s*(?P<host>[\w.-]+)\s*$")
_SUMMARY_RANK = regexcache.compile(r"^\s*rank\s*:\s*(?P<rank>\d+)")


def _attach_summary_fields(occ: Occurrence, nearby: dict[int, str]) -> None:
    """torchrun's failure summary prints `host :` and `rank :` on the lines above `exitcode :`;
    give such an occurrence the rank/host of its block."""
    for back in (1, 2, 3, 4):
        text = nearby.get(occ.line - back)
        if text is None:
            continue
        if occ.host is None and (m := _SUMMARY_HOST.match(text)):
            occ.host = m.group("host")
        if occ.rank is None and (m := _SUMMARY_RANK.match(text)):
            occ.rank = int(m.group("rank"))


def kept_lines_by_number(log: CompressedLog) -> dict[int, str]:
    """The kept lines the compressor can give back by number: each template's first line and the
    context kept around error lines."""
    return {**{t.first_line: t.text for t in log.templates}, **log.context}


def events_from_log(log: CompressedLog, exceptions=None) -> list[ErrorEvent]:
    """Group rule occurrences into events (one per rule and resolved type), in line order.
    `exceptions`: an `app.core.exceptions.ExceptionView` of the log's tracebacks (None: off); an
    occurrence on an exception line is then typed/role-labelled by it (a teardown exception is
    its own, recovered, event) and exception lines no rule matched become events of their own."""
    by_key: dict[tuple[str, ...], ErrorEvent] = {}
    nearby = kept_lines_by_number(log)
    # occurrences are capped per rule; the folded template knows the true last line
    template_last = {fold_key(t.text): t.last_line for t in log.templates if t.flagged}
    for occ in sorted(log.occurrences, key=lambda o: o.line):
        if occ.host is None or occ.rank is None:
            _attach_summary_fields(occ, nearby)
        spec = occ.rule.spec
        etype = spec.error_type
        if spec.type_from_group:
            etype = _canonical(occ.groups.get(spec.type_from_group)) or etype
        category = spec.category or occ.rule.category
        if etype != spec.error_type and spec.category is None:
            category = default_category(etype)
        cls = exceptions.classify(occ, etype, category) if exceptions is not None else None
        if cls is not None:
            etype, category = cls.error_type, cls.category
        key = (occ.rule.id, etype.value) if cls is None else (occ.rule.id, etype.value, cls.tag)
        ev = by_key.get(key)
        if ev is None:
            role, priority = spec.role, occ.rule.priority
            ev = ErrorEvent(
                id="", error_type=etype, category=category, role=role, priority=priority,
                rule_id=occ.rule.id, first_line=occ.line, count=0, text=occ.text,
                action=spec.action, hint=spec.hint, first_rank=occ.rank, first_host=occ.host,
                teardown_alone=spec.teardown_alone, gives_up_after=frozenset(spec.gives_up_after),
                last_resort=spec.last_resort, on_printer=spec.on_printer)
            if cls is not None:
                ev.role, ev.priority, ev.rule_id, ev.hint, ev.action = cls.role, cls.priority, cls.rule_id, cls.hint, cls.action
                ev.last_resort = False
                ev.recovered, ev.chained = cls.recovered, cls.chained
            by_key[key] = ev
        ev.count += 1
        ev.last_line = max(ev.last_line, occ.line, template_last.get(fold_key(occ.text), 0))
        if len(ev.occurrences) < 50:
            ev.occurrences.append(occ)
        if occ.rank is not None:
            ev.ranks.add(occ.rank)
        if occ.host:
            ev.hosts.add(occ.host)
        if occ.groups.get("gpu"):
            ev.gpus.add(occ.groups["gpu"])
        if (x := occ.groups.get("xid")) and x.isdigit():
            ev.xids.add(int(x))
        if occ.after_chain_marker and ev.count == 1:
            ev.chained = True
    # occurrences are capped per rule; a rule that yields one event gets the uncapped count
    events_per_rule = Counter(key[0] for key in by_key)
    for (rule_id, *_), ev in by_key.items():
        if events_per_rule[rule_id] == 1:
            ev.count = max(ev.count, log.rule_counts.get(rule_id, ev.count))
    events = sorted(by_key.values(), key=lambda e: e.first_line)
    for ev in events:
        if ev.error_type is ErrorType.NaNLoss:
            ev.spike_index = _steps_before(log, ev)
            _set_onset(ev, log.metrics, _step_of(ev.text))
        ev.warning = bool(ev.occurrences) and all(_PY_WARNING.search(o.text) for o in ev.occurrences)
        ev.leveled_warning = bool(ev.occurrences) and all(glog_not_error(o.text) for o in ev.occurrences)
        ev.retried = bool(ev.occurrences) and all(_retried(o, nearby) for o in ev.occurrences)
    if exceptions is not None:
        events.extend(exceptions.extra_events())
    events.extend(_metric_events(log))
    events.sort(key=lambda e: e.first_line)
    for i, ev in enumerate(events, 1):
        ev.id = f"e{i}"
    return events


# `UserWarning: CUDA initialization: The NVIDIA driver on your system is too old` names a
# failure class but is a warning the program went on from
_PY_WARNING = regexcache.compile(r"\b[A-Z]\w*Warning: ")
# C++ emitters that log through glog / absl / c10 (TensorFlow, XLA, Horovod, PyTorch's c10d) put
# the severity first: I(nfo) W(arning) E(rror) F(atal). A line they printed at W or I is one they
# went on from (TensorFlow's `W .../dso_loader.cc:64] Could not load dynamic library
# 'libnvinfer.so.7'; dlerror: ...`: it runs without TensorRT); their failures come at E or F.
# (glog `W0515 20:03:26.569 ...`; TensorFlow's `2022-12-09 16:44:07.597312: W tensorflow/...cc:64]`;
# c10 `[W socket.cpp:436]`, `[W1203 10:00:00.000 ...]`)
_GLOG_LEVEL = (r"(?:^|[\s\]>|:])(?:{L}\d{{4}} \d\d:\d\d:\d\d(?:\.\d+)?\s+\d+\s+[\w./-]+:\d+\]"
               r"|{L} [\w./-]+\.(?:cc|cpp|cxx|c|h):\d+\]"
               r"|\[{L}(?:\d{{4}} [\d:.]+(?: \d+)?)? ?[\w./-]+\.(?:cc|cpp|cxx|c|h):\d+\])")
GLOG_NOT_ERROR = regexcache.compile(_GLOG_LEVEL.format(L="[IW]"))
# The same markers at E or F. A wrapper that relays a child's output through its own logger at
# info (AlphaFold's `I0322 05:41:47.767 ... run_docker.py:222] 2022-03-21 20:41:47: E
# external/org_tensorflow/.../cuda_event.cc:29] Error polling for event status`) prints the
# child's severity inside its own: the innermost marker is the emitter's, the line an error.
# TensorFlow logs an op's failure at W from op_kernel.cc (OpKernelContext::CtxFailureWithWarning:
# `W tensorflow/core/framework/op_kernel.cc:968] Resource exhausted: OOM when allocating tensor`,
# TF 2: `op_kernel.cc:1745] OP_REQUIRES failed at ...`) and then raises it as the Python
# exception: that W line is the op failing, not a warning the job went on from. Its Coordinator
# logs the exception that stops the training at I (`I0722 ... coordinator.py:224] Error reported
# to Coordinator: <class '...UnknownError'>, ...; Input/output error`). c10d's TCP store logs
# each address it could not bind at W (socket.cpp SocketListenOp: `The server socket has failed to
# bind to [::]:29500 (errno: 98 - Address already in use).`) and then fails the listen at E and
# raises, unless the elastic rendezvous falls back to a client (its launch goes on to training):
# a log that ends on those lines ended in that failure.
GLOG_ERROR = regexcache.compile(
    _GLOG_LEVEL.format(L="[EF]")
    + r"|[/\\]framework[/\\]op_kernel\.cc:\d+\]|\bOP_REQUIRES failed at\b|\bError reported to Coordinator: "
    r"|\[c10d\] The server socket has failed to (?:bind to|listen on) \S+ \(errno: 98 - ")


def glog_not_error(text: str) -> bool:
    """The line carries a glog/absl/c10 severity of info or warning and none of error or fatal."""
    return bool(GLOG_NOT_ERROR.search(text)) and not GLOG_ERROR.search(text)


# a client that retries the failed request says so right after the error (huggingface_hub's
# `'(ReadTimeoutError(...))' thrown while requesting HEAD ...` then
# `Retrying in 1s [Retry 1/5].`, wandb's `entering retry loop`, urllib3's `Retrying (Retry(...`)
_RETRY_NOTICE = regexcache.compile(r"(?i)\bRetrying\b|\bthrown while requesting (?:HEAD|GET|POST) |\[Retry \d+/\d+\]|entering retry loop|\bwill retry\b")
RETRY_LOOKAHEAD = 4


def _retried(occ: Occurrence, nearby: dict[int, str]) -> bool:
    """The error's own line (`connect returned Connection refused, retrying`) or one of the next
    RETRY_LOOKAHEAD lines is a retry notice."""
    return bool(_RETRY_NOTICE.search(occ.text)) or any(
        _RETRY_NOTICE.search(nearby.get(occ.line + k, "")) for k in range(1, RETRY_LOOKAHEAD + 1))


_STEP_ON_LINE = regexcache.compile(r"(?i)\b(?:step|iteration|iter|global_step)\b[\s:=#]{0,12}(\d+)")


_EPOCH_ON_LINE = regexcache.compile(r"(?i)\bepoch\b[\s:=#\[]{0,12}(\d+)")
EPOCH_STEPS = 1000


def _steps_before(log: CompressedLog, ev: ErrorEvent) -> int | None:
    """How far into training a non-finite loss from a rule appeared: the step its line names, else
    the step the last progress line before it reached; else unknown. A log that shows no training
    before the loss is not read as step 0: a posted or tailed log is cut at its start as often as
    not, and a run that diverged 300k steps in reads the same from its last lines."""
    if m := _STEP_ON_LINE.search(ev.text):
        return int(m.group(1))
    if signals.enabled() and (step := signals.step_of(ev.text, epochs=False)) is not None:
        return step
    if (m := _EPOCH_ON_LINE.search(ev.text)) and int(m.group(1)) >= 1:
        return EPOCH_STEPS  # a whole epoch (or more) of training came before it
    prior = [p for p in log.recent_progress if p.line < ev.first_line]
    if prior and prior[-1].step is not None and signals.enabled():  # the step training had reached
        return prior[-1].step
    # (metric lines before it say no more: a logger prints one every N steps, N unknown)
    return None


def _step_of(text: str) -> int | None:
    m = _STEP_ON_LINE.search(text)
    if m:
        return int(m.group(1))
    # a layout `_STEP_ON_LINE` misses (`epoch: 3451 loss: nan`, a bar's `2/8614 [00:00<...`,
    # `num_updates=700`): app/core/signals.py
    return signals.step_of(text) if signals.enabled() else None


def _set_onset(ev: ErrorEvent, metrics: list[MetricPoint], step: int | None) -> None:
    """The onset as far as the sampled series shows it: `step` is the first step seen bad, the
    last finite metric point before the event's line the last one seen healthy."""
    ev.onset_step = step
    good = [p for p in metrics if p.line < ev.first_line and p.step is not None
            and all(math.isfinite(v) for v in p.values.values())]
    if good:
        ev.last_good_step, ev.last_good_line = good[-1].step, good[-1].line
    if ev.onset_step is not None and ev.last_good_step is not None and ev.last_good_step >= ev.onset_step:
        ev.last_good_step = None  # steps that do not increase (a restarted counter): no bound


def _metric_events(log: CompressedLog) -> list[ErrorEvent]:
    out: list[ErrorEvent] = []
    if log.nan_points:
        first = log.nan_points[0]
        ev = ErrorEvent(
            id="", error_type=ErrorType.NaNLoss, category=Category.FRAMEWORK, role=Role.CAUSE,
            priority=NAN_PRIORITY, rule_id="metrics.nan-loss", first_line=first.line,
            count=len(log.nan_points), text=_line_text(log, first), hint="loss or grad norm became NaN/inf",
            last_line=log.nan_points[-1].line)
        _set_onset(ev, log.metrics, first.step if first.step is not None else _step_of(ev.text))
        out.append(ev)
    spike = find_loss_spike(log.metrics)
    if spike is not None:
        idx, point, baseline = spike
        first_step = next((p.step for p in log.metrics if p.step is not None), None)
        since_start = (point.step - first_step) if (point.step is not None and first_step is not None) else idx
        ev = ErrorEvent(
            id="", error_type=ErrorType.LossSpike, category=Category.FRAMEWORK, role=Role.CAUSE,
            priority=SPIKE_PRIORITY, rule_id="metrics.loss-spike", first_line=point.line, count=1,
            text=_line_text(log, point),
            hint=f"loss {point.values['loss']:.4g} vs recent median {baseline:.4g}",
            spike_index=since_start, last_line=point.line, baseline=baseline)
        _set_onset(ev, log.metrics, point.step)
        out.append(ev)
    return out


def is_spike(loss: float, baseline: float) -> bool:
    return baseline > 0 and loss > baseline * SPIKE_FACTOR and loss - baseline > SPIKE_MIN_JUMP


def _line_text(log: CompressedLog, point: MetricPoint) -> str:
    if point.text:
        return point.text
    vals = ", ".join(f"{k}={v:.6g}" for k, v in point.values.items())
    return f"[metric] step={point.step} {vals}"


def _median(values: list[float]) -> float:
    """statistics.median (whose import pulls in decimal, fractions and random: ~8 ms of start-up)."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def find_loss_spike(points: list[MetricPoint]) -> tuple[int, MetricPoint, float] | None:
    """The first loss jump well above the median of the preceding window that does not recover.

    A spike the loss comes back from (a later point under RECOVERED_FACTOR × the baseline) is
    ordinary training noise, not a failure; one that lasts to the end of the log is.
    """
    series = [p for p in points if "loss" in p.values and math.isfinite(p.values["loss"])]
    losses = [p.values["loss"] for p in series]
    for i in range(2, len(series)):
        base = _median(losses[max(0, i - SPIKE_WINDOW):i])
        loss = losses[i]
        if is_spike(loss, base):
            if all(later >= base * RECOVERED_FACTOR for later in losses[i + 1:]):
                return i, series[i], base
    return None
