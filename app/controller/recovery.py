"""Recovery policy with attempt history: a diagnosis plus what happened before -> a plan.

Pure: no I/O besides loading `rules/recovery.yaml`, no FastAPI or SQLAlchemy. The service layer
(app/controller/service.py) gathers the facts and the history from the store, calls `plan_recovery`
and carries the plan out step by step, recording each step in the audit log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from app import resources
from app.core.types import Category, ErrorType, default_category, family_of

RULES_FILE = resources.data_file("rules", "recovery.yaml")  # the shipped recovery policy


class RecoveryAction(StrEnum):
    ISOLATE_AND_RESTART = "isolate_and_restart"
    RETRY = "retry"
    ROLLBACK_AND_SKIP = "rollback_and_skip"
    CAPTURE_AND_RESTART = "capture_and_restart"
    NOTIFY_OWNER = "notify_owner"
    NOTIFY_ADMIN = "notify_admin"
    NONE = "none"  # the job ended cleanly: nothing to recover


RESTARTING = frozenset({RecoveryAction.ISOLATE_AND_RESTART, RecoveryAction.RETRY,
                        RecoveryAction.ROLLBACK_AND_SKIP, RecoveryAction.CAPTURE_AND_RESTART})


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Budget(_Strict):
    attempts: int = Field(ge=1)
    window_s: float = Field(gt=0)


class Backoff(_Strict):
    initial_s: float = Field(ge=0)
    factor: float = Field(ge=1.0)
    max_s: float = Field(ge=0)

    def delay(self, retry_number: int) -> float:
        """Delay before the n-th restart (1-based) of the same failure streak."""
        if retry_number <= 0 or self.initial_s == 0:
            return 0.0
        return min(self.max_s, self.initial_s * self.factor ** (retry_number - 1))


class RepeatOffender(_Strict):
    failures: int = Field(ge=1)
    window_s: float = Field(gt=0)


class Breaker(_Strict):
    max_drain_share: float = Field(gt=0, le=1)
    window_s: float = Field(gt=0)


class Stall(_Strict):
    factor: float = Field(gt=1)
    floor_s: float = Field(gt=0)
    straggler_factor: float = Field(gt=1)
    # before an attempt's first progress line (imports, rendezvous, loading a checkpoint) a
    # silent log is not a stall until this long
    startup_s: float = Field(default=900.0, gt=0)


class SkipBatches(_Strict):
    """Training iterations (optimizer steps, the step counter the log prints) to skip around
    the onset: from `before` steps before the first possibly bad step to `after` steps after the
    first step seen bad, both ends included."""

    before: int = Field(ge=0)
    after: int = Field(ge=0)


class Defaults(_Strict):
    same_failure_limit: int = Field(ge=1)
    budget: Budget
    backoff: Backoff
    repeat_offender: RepeatOffender
    breaker: Breaker
    stall: Stall


class Example(_Strict):
    error_type: ErrorType
    category: Category | None = None
    expect: RecoveryAction | None = None
    expect_not: RecoveryAction | None = None


class RecoveryPolicy(_Strict):
    id: str
    error_types: list[ErrorType] = Field(default_factory=list)
    categories: list[Category] = Field(default_factory=list)
    families: list[str] = Field(default_factory=list)
    action: RecoveryAction
    probe_first: bool = False
    budget: Budget | None = None
    backoff: Backoff | None = None
    escalate: RecoveryAction = RecoveryAction.NOTIFY_ADMIN
    skip_batches: SkipBatches | None = None
    # the hosts the log names are kept out of the restart even when no probe convicts them
    # (excluded for this job, not drained): a log that names a host for an ECC error or an Xid
    # outweighs a probe that passed, which cannot reproduce every fault
    exclude_named_hosts: bool = False
    reason: str
    examples: list[Example] = Field(default_factory=list)

    def matches(self, error_type: ErrorType, category: Category) -> bool:
        return (error_type in self.error_types or category in self.categories
                or family_of(error_type.value) in self.families)


class RecoveryRules(_Strict):
    kind: str
    family: str
    description: str = ""
    defaults: Defaults
    policies: list[RecoveryPolicy]

    @model_validator(mode="after")
    def _unique_ids(self) -> RecoveryRules:
        ids = [p.id for p in self.policies]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"duplicate policy ids: {dupes}")
        return self

    def policy_for(self, error_type: ErrorType, category: Category) -> RecoveryPolicy:
        for policy in self.policies:
            if policy.matches(error_type, category):
                return policy
        return _FALLBACK

    def budget(self, policy: RecoveryPolicy) -> Budget:
        return policy.budget or self.defaults.budget

    def backoff(self, policy: RecoveryPolicy) -> Backoff:
        return policy.backoff or self.defaults.backoff


_FALLBACK = RecoveryPolicy(id="fallback", action=RecoveryAction.NOTIFY_ADMIN,
                           reason="No recovery policy covers this failure; an administrator should look.")


class RecoveryRulesError(ValueError):
    pass


def load_recovery_rules(path: Path | str | None = None) -> RecoveryRules:
    """Load and check the policy file; a bad file or a failing example raises, naming the file."""
    path = Path(path or RULES_FILE)
    try:
        rules = RecoveryRules.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise RecoveryRulesError(f"{path}: {exc}") from exc
    for policy in rules.policies:
        for ex in policy.examples:
            got = rules.policy_for(ex.error_type, ex.category or default_category(ex.error_type)).action
            if (ex.expect and got != ex.expect) or (ex.expect_not and got == ex.expect_not):
                raise RecoveryRulesError(
                    f"{path}: policy {policy.id}: example {ex.error_type.value} gives {got.value}, "
                    f"expected {ex.expect or 'not ' + str(ex.expect_not)}")
    return rules


# ---------------------------------------------------------------------------------------------
# facts, history and the plan


# end states that are failures even when the exit code is 0:0 (Slurm reports a timed-out job's
# batch script as 0:0 to the epilog, and a node failure has no exit of the script at all)
FAILED_STATES = frozenset({"failed", "timeout", "node_fail", "out_of_memory", "boot_fail", "deadline",
                           "preempted"})
NOT_ENDED_STATES = frozenset({"running", "pending", "requeued", "requeue_hold", "configuring", "suspended"})
# a hang or an unrecognised log is a failure only with a signal from the scheduler
NO_ERROR_TYPES = frozenset({ErrorType.Hang, ErrorType.Unknown})


@dataclass(frozen=True)
class JobEnd:
    """How the failed attempt ended, as the scheduler (or its epilog) reported it."""

    state: str | None = None  # the scheduler's word, lower case: completed, failed, timeout, running, ...
    exit_code: str | None = None  # "exit:signal"; None when nobody reported it

    @property
    def running(self) -> bool:
        return self.state in NOT_ENDED_STATES

    @property
    def failed(self) -> bool:
        return self.state in FAILED_STATES or (self.exit_code is not None and self.exit_code != "0:0")

    @property
    def stopped_unfinished(self) -> str | None:
        """How a job that did not finish stopped, as a diagnosis's Hang explains it ("still running
        without progress", "ended timeout", "ended with exit 1:0"); None when it finished."""
        if self.running:
            return "still running without progress"
        if not self.failed:
            return None
        return f"ended {self.state}" if self.state else f"ended with exit {self.exit_code}"

    @property
    def clean(self) -> str | None:
        """Why the attempt counts as ended cleanly, or None."""
        if self.running or self.state in FAILED_STATES:
            return None
        if self.state == "completed":
            return "the scheduler reports the job completed"
        if self.exit_code == "0:0":
            return f"the job ended with exit code 0 (state {self.state or 'not reported'})"
        return None


@dataclass(frozen=True)
class Facts:
    """What the diagnosis says about this failure."""

    error_type: ErrorType
    category: Category
    fingerprint: str
    suspect_hosts: tuple[str, ...] = ()
    job_hosts: tuple[str, ...] = ()
    last_step: int | None = None  # the last training step the failed attempt reached
    onset_step: int | None = None  # loss spike / non-finite loss: the first step seen bad
    last_good_step: int | None = None  # and the last step seen healthy before it
    evidence: tuple[str, ...] = ()
    end: JobEnd = field(default_factory=JobEnd)
    # (free bytes, bytes one checkpoint takes) on the job's checkpoint filesystem, when known
    checkpoint_space: tuple[int, int] | None = None


@dataclass(frozen=True)
class PriorAttempt:
    """One earlier failure of the same job that the controller handled."""

    fingerprint: str
    action: RecoveryAction
    last_step: int | None
    at: datetime


class StepKind(StrEnum):
    PROBE = "probe"
    HEALTH = "health"
    DRAIN = "drain"
    CAPTURE = "capture"
    REQUEUE = "requeue"
    NOTIFY = "notify"


@dataclass(frozen=True)
class Step:
    kind: StepKind
    reason: str
    hosts: tuple[str, ...] = ()
    params: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    action: RecoveryAction
    policy_id: str
    reason: str
    steps: tuple[Step, ...]
    restart: bool
    retry_number: int  # 1 for the first restart of a streak
    delay_s: float = 0.0
    stopped: str | None = None  # why restarting stopped (budget, same failure), when it did
    repeat_offenders: tuple[str, ...] = ()


def _progressed(now_step: int | None, then_step: int | None) -> bool:
    return now_step is not None and then_step is not None and now_step > then_step


def streak(facts: Facts, history: list[PriorAttempt], *, since: datetime) -> tuple[int, int]:
    """(restarts, same-fingerprint restarts) since the last training progress, newest first.

    Training progress between an earlier failure and this one resets both counts: a job that
    fails now and then while it keeps training is worth restarting; one that fails at the same
    place every time is not. The same-fingerprint count stops at the first different failure.
    """
    restarts = same = 0
    same_run = True
    for prior in sorted(history, key=lambda p: p.at, reverse=True):
        if prior.at < since or _progressed(facts.last_step, prior.last_step):
            break
        if prior.action not in RESTARTING:
            continue
        restarts += 1
        if same_run and prior.fingerprint == facts.fingerprint:
            same += 1
        else:
            same_run = False
    return restarts, same


def breaker_allows(breaker: Breaker, *, drained: set[str], host: str, total_nodes: int) -> tuple[bool, int]:
    """Whether draining `host` keeps the cluster's drains within the window under the breaker's
    share of `total_nodes` (`drained`: hosts drained within the window, this run's included),
    and that limit in nodes. One node is always allowed: a share of a small cluster rounds to
    zero, and a breaker that refuses every drain leaves a broken node in service."""
    allowed = max(1, int(total_nodes * breaker.max_drain_share))
    return len(drained | {host}) <= allowed, allowed


def plan_recovery(facts: Facts, history: list[PriorAttempt], host_failures: dict[str, int],
                  rules: RecoveryRules, *, now: datetime) -> Plan:
    """The recovery for this failure given the job's history and the hosts' records.

    `host_failures` counts, per host, the infrastructure failures (any job, within the repeat-
    offender window) that named the host before this one.
    """
    clean = facts.end.clean
    if clean:
        return Plan(RecoveryAction.NONE, "completed", f"completed, nothing to do: {clean}", (),
                    restart=False, retry_number=0)
    if facts.error_type in NO_ERROR_TYPES and not facts.end.running and not facts.end.failed:
        # a clean log reads as a hang (it stops without an error): with neither an end state nor
        # an exit code (Slurm accounting off, an epilog that sent none) a restart could rerun a
        # finished job, so this is for a person to judge
        why = (f"the log reads as {facts.error_type.value}, but no failure was reported for the ended job "
               f"(state {facts.end.state or 'not reported'}, exit code {facts.end.exit_code or 'not reported'}); "
               "not restarted without a failure signal")
        return Plan(RecoveryAction.NOTIFY_ADMIN, "no_failure_signal", why,
                    (Step(StepKind.NOTIFY, why, params={"to": "admin", "error_type": facts.error_type.value,
                                                        "evidence": list(facts.evidence[:5])}),),
                    restart=False, retry_number=0, stopped=why)
    if family_of(facts.error_type.value) == "storage" and facts.checkpoint_space is not None:
        free, need = facts.checkpoint_space
        if free < need:
            # a save that failed on a full disk fails again at the next save: a person must make room
            why = (f"the checkpoint filesystem is full: {free >> 20} MiB free, a checkpoint takes {need >> 20} MiB; "
                   "free space (or move the checkpoints) before restarting")
            return Plan(RecoveryAction.NOTIFY_OWNER, "checkpoint_disk_full", why,
                        (Step(StepKind.NOTIFY, why, params={"to": "owner", "error_type": facts.error_type.value,
                                                            "evidence": list(facts.evidence[:5])}),),
                        restart=False, retry_number=0)
    policy = rules.policy_for(facts.error_type, facts.category)
    budget = rules.budget(policy)
    limit = rules.defaults.same_failure_limit
    restarts, same = streak(facts, history, since=now - timedelta(seconds=budget.window_s))
    notify = Step(StepKind.NOTIFY, policy.reason, params={
        "to": "owner" if policy.action is RecoveryAction.NOTIFY_OWNER else "admin",
        "error_type": facts.error_type.value, "evidence": list(facts.evidence[:5])})

    if policy.action not in RESTARTING:
        return Plan(policy.action, policy.id, policy.reason, (notify,), restart=False, retry_number=0)

    stopped = None
    if same + 1 >= limit:
        stopped = (f"the same failure ({facts.fingerprint}) {same + 1} times in a row without "
                   f"training progress (limit {limit})")
    elif restarts + 1 > budget.attempts:
        stopped = (f"retry budget spent: {restarts} restarts within {budget.window_s:.0f} s "
                   f"without training progress (budget {budget.attempts})")
    if stopped:
        esc = Step(StepKind.NOTIFY, f"stopped restarting: {stopped}", params={
            "to": "owner" if policy.escalate is RecoveryAction.NOTIFY_OWNER else "admin",
            "error_type": facts.error_type.value, "evidence": list(facts.evidence[:5])})
        return Plan(policy.escalate, policy.id, policy.reason, (esc,), restart=False,
                    retry_number=restarts + 1, stopped=stopped)

    steps: list[Step] = []
    offenders: tuple[str, ...] = ()
    retry_number = restarts + 1
    if facts.category is Category.INFRASTRUCTURE:
        threshold = rules.defaults.repeat_offender.failures
        # only hosts of this job: a host the log names that the job never ran on (a peer's
        # address in an NCCL error, a storage server) is no evidence against that host here
        offenders = tuple(sorted(h for h in facts.suspect_hosts
                                 if host_failures.get(h, 0) + 1 >= threshold
                                 and (not facts.job_hosts or h in facts.job_hosts)))
    suspects = [h for h in facts.suspect_hosts if h in facts.job_hosts]
    if policy.probe_first and facts.job_hosts:
        steps.append(Step(StepKind.PROBE, "find the faulty node with the two-round allgather test",
                          hosts=facts.job_hosts, params={"suspects": suspects}))
        if suspects and facts.category is Category.INFRASTRUCTURE:
            # the allgather sees the fabric and the collectives, not a GPU's pending page
            # retirements or a dead IB port: the node checks of rules/probes.yaml do
            steps.append(Step(StepKind.HEALTH, "run the node health probes on the hosts the log names",
                              hosts=tuple(suspects)))
    if offenders:
        steps.append(Step(StepKind.DRAIN, f"repeat offender: named by {threshold} or more "
                          "infrastructure failures within the window", hosts=offenders,
                          params={"source": "repeat_offender"}))
    if policy.probe_first and facts.job_hosts:
        steps.append(Step(StepKind.DRAIN, "failed the node probe or a health probe", params={"source": "probe"}))
    if policy.action is RecoveryAction.CAPTURE_AND_RESTART:
        steps.append(Step(StepKind.CAPTURE, "record the last progress and stack dumps before restarting",
                          hosts=facts.job_hosts, params={"last_step": facts.last_step}))
    delay = rules.backoff(policy).delay(retry_number)
    # the log prints an iteration once it is done and a checkpoint of step N holds the state after
    # step N: a complete checkpoint of the last step the log shows done is good to resume from
    # (one being written when the job died is rejected as incomplete by the checkpoint checks)
    requeue: dict = {"delay_s": delay, "before_step": facts.last_step + 1 if facts.last_step is not None else None}
    if policy.exclude_named_hosts and suspects:
        requeue["exclude_named"] = list(suspects)
    if policy.action is RecoveryAction.ROLLBACK_AND_SKIP and facts.onset_step is not None:
        skip = policy.skip_batches or SkipBatches(before=0, after=0)
        # the onset lies after the last step seen healthy: a checkpoint saved after that step
        # may already hold the bad update, and the skipped data starts right after it
        first_suspect = facts.onset_step
        if facts.last_good_step is not None and facts.last_good_step < facts.onset_step:
            first_suspect = facts.last_good_step + 1
        requeue["before_step"] = first_suspect
        requeue["skip"] = [max(0, first_suspect - skip.before), facts.onset_step + skip.after]
    steps.append(Step(StepKind.REQUEUE, f"restart (attempt {retry_number} of {budget.attempts})",
                      params=requeue))
    return Plan(policy.action, policy.id, policy.reason, tuple(steps), restart=True,
                retry_number=retry_number, delay_s=delay, repeat_offenders=offenders)
