"""The restart controller: a diagnosis in, the right recovery out, every step in the audit log.

`Controller.recover` is a reconcile step: it reads the stored state (job, diagnosis, history,
host incidents, the cluster's switch), plans with the pure policy (app/controller/recovery.py)
and carries the plan out step by step (probe, drain, capture, requeue, notify), recording each
step before and after in `controller_actions`. A notification is a webhook POST delivered in the
background (notify.py); its audit row says how the delivery ended. Dry-run (the default until an admin enables a
cluster) runs the same code with the scheduler recording instead of acting.

Safety: one controller action per job at a time (a lock row), an idempotency key per request (a
retried webhook gets the first run back; dry runs keep their keys apart, "dry-run:<key>", so a
dry run never answers a real request), and a breaker that refuses to drain more than a share
of a cluster's nodes within a window.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from datetime import datetime, timedelta
from typing import Protocol

from sqlalchemy import select

from app.actions.service import finish_action, record_action
from app.controller import store
from app.controller.checkpoints import choose_checkpoint, space
from app.controller.health import HealthProbe, check_hosts, host_status
from app.controller.hosts import map_hosts, normalise_hosts
from app.controller.models import RecoveryRun
from app.controller.notify import Delivery, WebhookNotifier, message
from app.controller.probe_plan import ProbeReport
from app.controller.recovery import (
    Facts, JobEnd, Plan, RecoveryAction, RecoveryRules, Step, StepKind, breaker_allows, plan_recovery,
)
from app.controller.schedulers.base import JobInfo, RecordingScheduler, RestartSpec, Scheduler, SchedulerError
from app.core.fingerprint import fingerprint
from app.core.rank import stopped_on_progress
from app.core.types import Category, Diagnosis, ErrorType, family_of
from app.db.base import utcnow
from app.db.engine import Database
from app.diagnoses.models import DiagnosisRow, DiagnosisStatus
from app.errors import BadRequest, Conflict, InvalidInput
from app.jobs.models import Attempt, Job
from app.jobs.service import get_job


DRY_RUN_KEY_PREFIX = "dry-run:"


class Prober(Protocol):
    def __call__(self, scheduler: Scheduler, hosts: Sequence[str], *, suspects: Sequence[str]) -> ProbeReport: ...


_STEP_RX = re.compile(r"(?:iteration|step|iter)\s*[:=]?\s*(\d+)", re.IGNORECASE)


def facts_from(diagnosis: Diagnosis, job_hosts: Sequence[str], end: JobEnd | None = None) -> Facts:
    end = end or JobEnd()
    if (why := end.stopped_unfinished) is not None:
        # a log that ends on a training step shows no failure by itself; a job that was stalled
        # (the live watch acts only on a stall) or ended without finishing hung at that step
        diagnosis = stopped_on_progress(diagnosis, why)
    rc = diagnosis.root_cause
    onset = rc.onset_step
    if onset is None and rc.error_type in (ErrorType.LossSpike, ErrorType.NaNLoss):
        for ev in rc.evidence:
            m = _STEP_RX.search(ev.text)
            if m:
                onset = int(m.group(1))
                break
    last = diagnosis.last_progress.step if diagnosis.last_progress else None
    # `node[1-4]` and `node3.cluster.example` become node1..node4 and node3, the names the
    # scheduler and the incident counts use
    suspects = normalise_hosts(list(diagnosis.action.suspect_hosts) + [e.host for e in rc.evidence if e.host])
    return Facts(error_type=rc.error_type, category=rc.category, fingerprint=fingerprint(diagnosis),
                 suspect_hosts=suspects, job_hosts=normalise_hosts(job_hosts),
                 last_step=last, onset_step=onset if onset is not None else (last if rc.error_type in (
                     ErrorType.LossSpike, ErrorType.NaNLoss) else None),
                 last_good_step=rc.last_good_step,
                 evidence=tuple(e.text for e in rc.evidence), end=end)


# Slurm shows COMPLETING while the epilog runs; its reason says what the end state will be
_REASON_STATE = {"TimeLimit": "timeout", "NodeDown": "node_fail", "NodeFail": "node_fail", "OutOfMemory": "out_of_memory"}


def job_end(*, stored_state: str | None, stored_exit: str | None, info: JobInfo | None) -> JobEnd:
    """How the attempt ended: the scheduler's word first (it is there while the job is known), the
    epilog's report when the scheduler no longer knows the job or is still completing it."""
    state = stored_state if stored_state not in (None, "unknown") else None
    exit_code = stored_exit
    if info is not None:
        word = info.state.lower()
        if word == "completing":
            state = _REASON_STATE.get(info.reason or "", state)
        elif word != "unknown":
            state = word
        exit_code = info.exit_code or exit_code
    return JobEnd(state=state, exit_code=exit_code)


class Controller:
    def __init__(self, *, db: Database, rules: RecoveryRules, scheduler_for: Callable[[Job], Scheduler],
                 prober: Prober | None = None, clock: Callable[[], datetime] = utcnow,
                 lock_ttl_s: float = 1800.0, holder: str | None = None,
                 notifier: WebhookNotifier | None = None, health_probes: Sequence[HealthProbe] = (),
                 health_env: dict[str, str] | None = None) -> None:
        self.db = db
        self.health_probes = list(health_probes)
        self.health_env = health_env
        self.rules = rules
        self.scheduler_for = scheduler_for
        self.prober = prober
        self.notifier = notifier
        self.clock = clock
        self.lock_ttl_s = lock_ttl_s
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}"

    # -- entry point ---------------------------------------------------------------------------
    def recover(self, *, job_id: int, actor: str, diagnosis_id: int | None = None,
                idempotency_key: str | None = None, checkpoint_dir: str | None = None,
                dry_run: bool | None = None) -> RecoveryRun:
        """Plan and carry out the recovery of the job's failure. `dry_run=None`: the cluster's
        switch decides; True forces a dry run; False is refused unless the cluster is enabled."""
        with self.db.transaction() as session:
            job = get_job(session=session, job_id=job_id)
            row = self._diagnosis(session, job, diagnosis_id)
            control = store.cluster_control(session=session, cluster=job.cluster)
            enabled = bool(control and control.actions_enabled)
            if dry_run is False and not enabled:
                raise Conflict(f"actions are not enabled for cluster {job.cluster!r}; an admin must enable them",
                               detail={"cluster": job.cluster})
            dry = (not enabled) if dry_run is None else dry_run
            # a dry run is stored under its own key, so it never satisfies a real request with the
            # same key (enabling actions then acts); a dry run asked after a real one with that key
            # gets the real run back (it already happened, rehearsing it again tells nothing)
            key = idempotency_key or f"job:{job.id}:diagnosis:{row.id}"
            for candidate in ((key, DRY_RUN_KEY_PREFIX + key) if dry else (key,)):
                existing = store.run_by_key(session=session, key=candidate)
                if existing is not None:
                    return existing
            if dry:
                key = DRY_RUN_KEY_PREFIX + key
            if not store.take_lock(session=session, job_id=job.id, holder=self.holder,
                                   now=self.clock(), ttl_s=self.lock_ttl_s):
                raise Conflict(f"another controller action is in progress for job {job.id}",
                               detail={"job_id": job.id})
        try:
            return self._recover_locked(job_id=job_id, diagnosis_row_id=row.id, key=key, actor=actor,
                                        checkpoint_dir=checkpoint_dir, dry_run=dry)
        finally:
            with self.db.transaction() as session:
                store.release_lock(session=session, job_id=job_id, holder=self.holder)

    @staticmethod
    def _diagnosis(session, job: Job, diagnosis_id: int | None) -> DiagnosisRow:  # noqa: ANN001
        query = select(DiagnosisRow).where(DiagnosisRow.job_id == job.id, DiagnosisRow.status == DiagnosisStatus.DONE)
        if diagnosis_id is not None:
            query = query.where(DiagnosisRow.id == diagnosis_id)
        row = session.scalars(query.order_by(DiagnosisRow.id.desc())).first()
        if row is None or not row.result:
            raise BadRequest(f"job {job.id} has no finished diagnosis" + (f" {diagnosis_id}" if diagnosis_id else ""),
                             detail={"job_id": job.id, "diagnosis_id": diagnosis_id})
        return row

    # -- plan ------------------------------------------------------------------------------------
    def _recover_locked(self, *, job_id: int, diagnosis_row_id: int, key: str, actor: str,
                        checkpoint_dir: str | None, dry_run: bool) -> RecoveryRun:
        now = self.clock()
        real = self.scheduler_for_job(job_id)
        with self.db.transaction() as session:
            external_id = get_job(session=session, job_id=job_id).external_id
        try:
            info: JobInfo | None = real.job(external_id)
        except SchedulerError:
            info = None  # the scheduler forgot the job: the epilog's report is all there is
        with self.db.transaction() as session:
            job = get_job(session=session, job_id=job_id)
            row = session.get(DiagnosisRow, diagnosis_row_id)
            diagnosis = Diagnosis.from_json_dict(row.result)
            attempt = session.get(Attempt, row.attempt_id)
            end = job_end(stored_state=(attempt.state if attempt else None) or job.state,
                          stored_exit=attempt.exit_code if attempt else None, info=info)
            facts = facts_from(diagnosis, job.host_names, end)
            ckpt_dir = checkpoint_dir or (info.checkpoint_dir if info else None)
            if ckpt_dir and family_of(facts.error_type.value) == "storage":
                # a storage error: is the checkpoint filesystem full (no restart can save then)?
                facts = replace(facts, checkpoint_space=space(ckpt_dir))
            window = self.rules.defaults.repeat_offender.window_s
            counts = store.host_failures(session=session, cluster=job.cluster, hosts=list(facts.suspect_hosts),
                                         since=now - timedelta(seconds=window))
            plan = plan_recovery(facts, store.history(session=session, job_id=job.id, dry_run=dry_run), counts,
                                 self.rules, now=now)
            run = RecoveryRun(job_id=job.id, diagnosis_id=row.id, idempotency_key=key,
                              fingerprint=facts.fingerprint, error_type=facts.error_type.value,
                              action=plan.action.value, policy_id=plan.policy_id, last_step=facts.last_step,
                              retry_number=plan.retry_number, dry_run=dry_run,
                              status="running" if plan.restart else "stopped" if plan.stopped else "done",
                              reason=plan.stopped or plan.reason, plan=_plan_json(plan), outcome={})
            session.add(run)
            # a dry run is a rehearsal: it must not make a host a repeat offender
            if (not dry_run and facts.category is Category.INFRASTRUCTURE and facts.suspect_hosts
                    and plan.action is not RecoveryAction.NONE):
                store.add_incidents(session=session, cluster=job.cluster, hosts=list(facts.suspect_hosts),
                                    job_id=job.id, fingerprint=facts.fingerprint, error_type=facts.error_type.value)
            session.flush()
            decide = record_action(session=session, job_id=job.id, kind="decide", actor=actor, dry_run=dry_run,
                                   diagnosis_id=row.id, params={"run_id": run.id, **_plan_json(plan),
                                                                "job_end": asdict(end)})
            finish_action(session=session, action_id=decide.id, status="done",
                          result={"reason": plan.stopped or plan.reason})
            run_id, cluster, external_id = run.id, job.cluster, job.external_id
            node_count = store.cluster_control(session=session, cluster=cluster)
            node_count = node_count.node_count if node_count else None

        scheduler: Scheduler = RecordingScheduler(real) if dry_run else real
        ctx = _StepContext(job_id=job_id, diagnosis_id=diagnosis_row_id, run_id=run_id, cluster=cluster,
                           external_id=external_id, actor=actor, dry_run=dry_run, facts=facts, plan=plan,
                           checkpoint_dir=checkpoint_dir, node_count=node_count)
        status = "done" if plan.restart or not plan.stopped else "stopped"
        try:
            for step in plan.steps:
                self._step(ctx, scheduler, step)
        except Exception as exc:
            status = "failed"
            ctx.outcome["error"] = f"{type(exc).__name__}: {exc}"
        short = ctx.outcome.get("not_requeued")
        if short and status != "failed":
            status = "stopped"
            self._audit(ctx, "notify", {"reason": short, "to": "admin"},
                        lambda: {"notified": "admin", "message": short})
        with self.db.transaction() as session:
            run = session.get(RecoveryRun, run_id)
            run.status = status
            if short:
                run.reason = short
            run.outcome = {**ctx.outcome, "commands": getattr(scheduler, "commands", [])}
            return run

    def resume_node(self, *, cluster: str, host: str, actor: str, reason: str = "") -> dict:
        """A repaired node back into service: resumed in the scheduler, its host incidents resolved
        (a repeat offender starts again from zero). `host` may be an FQDN of a scheduler node."""
        scheduler = self.scheduler_for(None)
        nodes = scheduler.nodes()
        node = map_hosts([host], nodes).nodes.get(host)
        if node is None:
            raise InvalidInput(f"host {host!r} is unknown to the {scheduler.name} scheduler",
                               detail={"host": host, "cluster": cluster})
        before = nodes[node].state
        scheduler.resume(node, reason=reason or f"logdx: repaired ({actor})")
        with self.db.transaction() as session:
            resolved = sum(store.resolve_incidents(session=session, cluster=cluster, host=name, actor=actor,
                                                   now=self.clock())
                           for name in dict.fromkeys((node, *normalise_hosts([node, host]))))
        return {"cluster": cluster, "host": node, "state_before": before, "state": scheduler.nodes()[node].state,
                "incidents_resolved": resolved, "resolved_by": actor}

    def scheduler_for_job(self, job_id: int) -> Scheduler:
        with self.db.transaction() as session:
            return self.scheduler_for(get_job(session=session, job_id=job_id))

    # -- steps -----------------------------------------------------------------------------------
    def _audit(self, ctx: _StepContext, kind: str, params: dict, fn: Callable[[], dict]) -> dict:
        """Record the step, run it, record how it ended (a failure is recorded, then re-raised)."""
        with self.db.transaction() as session:
            action_id = record_action(session=session, job_id=ctx.job_id, kind=kind, actor=ctx.actor,
                                      dry_run=ctx.dry_run, diagnosis_id=ctx.diagnosis_id,
                                      params={"run_id": ctx.run_id, **params}).id
        try:
            result = fn()
        except Exception as exc:
            with self.db.transaction() as session:
                finish_action(session=session, action_id=action_id, status="failed",
                              result={"error": f"{type(exc).__name__}: {exc}"})
            raise
        status = result.pop("_status", "done")
        with self.db.transaction() as session:
            finish_action(session=session, action_id=action_id, status=status, result=result)
        return result

    def _step(self, ctx: _StepContext, scheduler: Scheduler, step: Step) -> None:
        if step.kind is StepKind.PROBE:
            self._audit(ctx, "probe", {"hosts": list(step.hosts), "reason": step.reason, **step.params},
                        lambda: self._probe(ctx, scheduler, step))
        elif step.kind is StepKind.HEALTH:
            self._audit(ctx, "health", {"hosts": list(step.hosts), "reason": step.reason},
                        lambda: self._health(ctx, scheduler, step))
        elif step.kind is StepKind.DRAIN:
            # a host that failed a health probe is faulty even when the allgather passed
            hosts = list(step.hosts) or list(dict.fromkeys([*ctx.outcome.get("probe", {}).get("faulty", []),
                                                            *ctx.outcome.get("health", {}).get("failed", [])]))
            named_in_log = list(ctx.facts.suspect_hosts)
            # node3.example -> the scheduler's node3
            known = map_hosts(hosts + named_in_log, scheduler.nodes()).nodes
            hosts = list(dict.fromkeys(known.get(h, h) for h in hosts))
            # the hosts the log names first: when the breaker lets only some drains through,
            # those are the ones the evidence points at
            named = {known.get(h, h) for h in named_in_log}
            hosts.sort(key=lambda h: h not in named)
            for host in hosts:
                if host in ctx.drained:
                    continue
                ctx.exclude.append(host)
                self._audit(ctx, "drain", {"host": host, "reason": step.reason, **step.params},
                            lambda host=host: self._drain(ctx, scheduler, host, step.reason))
        elif step.kind is StepKind.CAPTURE:
            self._audit(ctx, "capture", {"hosts": list(step.hosts), "reason": step.reason},
                        lambda: self._capture(ctx, scheduler))
        elif step.kind is StepKind.REQUEUE:
            self._audit(ctx, "requeue", {"reason": step.reason, **step.params},
                        lambda: self._requeue(ctx, scheduler, step))
        elif step.kind is StepKind.NOTIFY:
            self._notify(ctx, step)

    def _notify(self, ctx: _StepContext, step: Step) -> None:
        """Tell the owner or an admin through the webhook, in the background: the audit row says
        `sending`, then how the delivery ended. Dry runs record the message and send nothing."""
        to = step.params.get("to", "admin")
        event = "escalate" if ctx.plan.stopped else "notify"
        with self.db.transaction() as session:
            job = get_job(session=session, job_id=ctx.job_id)
            owner = job.user
            action_id = record_action(session=session, job_id=ctx.job_id, kind="notify", actor=ctx.actor,
                                      dry_run=ctx.dry_run, diagnosis_id=ctx.diagnosis_id,
                                      params={"run_id": ctx.run_id, "reason": step.reason, **step.params}).id
        text = message(event=event, to=to, cluster=ctx.cluster, external_id=ctx.external_id, job_id=ctx.job_id,
                       error_type=ctx.facts.error_type.value, action=ctx.plan.action.value, reason=step.reason)
        payload = {"text": text, "event": event, "to": to, "owner": owner, "cluster": ctx.cluster,
                   "job_id": ctx.job_id, "external_id": ctx.external_id, "run_id": ctx.run_id,
                   "diagnosis_id": ctx.diagnosis_id, "error_type": ctx.facts.error_type.value,
                   "fingerprint": ctx.facts.fingerprint, "action": ctx.plan.action.value,
                   "policy_id": ctx.plan.policy_id, "reason": step.reason, "stopped": ctx.plan.stopped}
        result = {"notified": to, "message": text, "payload": payload}
        ctx.outcome["notify"] = {"to": to, "event": event}
        if ctx.dry_run or self.notifier is None:
            why = "not sent: dry run" if ctx.dry_run else "not sent: no webhook (LOGDX_NOTIFY_WEBHOOK_URL)"
            with self.db.transaction() as session:
                finish_action(session=session, action_id=action_id, status="done", result={**result, "delivery": why})
            return

        def delivered(delivery: Delivery) -> None:
            with self.db.transaction() as session:
                finish_action(session=session, action_id=action_id,
                              status="done" if delivery.delivered else "failed",
                              result={**result, "delivery": delivery.to_dict()})

        with self.db.transaction() as session:
            finish_action(session=session, action_id=action_id, status="sending", result=result)
        self.notifier.send(payload, done=delivered)

    def _capture(self, ctx: _StepContext, scheduler: Scheduler) -> dict:
        """Evidence of a hang before the restart kills it: the last progress and stack dumps."""
        result: dict = {"last_step": ctx.facts.last_step, "evidence": list(ctx.facts.evidence[:5])}
        dump = getattr(scheduler, "stack_dump", None)
        if dump is None:
            result["stack_dumps"] = f"not taken: the {scheduler.name} scheduler cannot run py-spy on the job"
            return result
        try:
            result["stack_dumps"] = dump(ctx.external_id) or "not taken: the job is not running"
        except Exception as exc:  # noqa: BLE001 - a failed dump must not stop the restart
            result["stack_dumps"] = f"not taken: {type(exc).__name__}: {exc}"
        return result

    def _probe(self, ctx: _StepContext, scheduler: Scheduler, step: Step) -> dict:
        if self.prober is None:
            ctx.outcome["probe"] = {"verdict": "not_run"}
            return {"_status": "skipped", "why": "no prober is configured"}
        nodes = scheduler.nodes()
        names = map_hosts(step.hosts, nodes)
        # nodes drained earlier (an earlier attempt's bad node) are not probed again
        hosts = [h for h in names.known if not nodes[h].drained]
        untested = list(names.unknown)
        if not hosts or (len(hosts) < 2 and not [n for n in nodes if n not in hosts]):
            ctx.outcome["probe"] = {"verdict": "unknown", "untested": list(step.hosts)}
            return {"_status": "skipped", "verdict": "unknown",
                    "why": f"nothing to probe: job hosts {list(step.hosts)[:10]} are "
                    f"unknown to the {scheduler.name} scheduler or drained"}
        suspects = map_hosts(step.params.get("suspects", []), nodes).known
        report = self.prober(scheduler, hosts, suspects=suspects)
        with self.db.transaction() as session:
            probe = store.save_probe(session=session, cluster=ctx.cluster, job_id=ctx.job_id,
                                     hosts=hosts, report=report)
        # hosts the scheduler does not know, and hosts the probe could not get (busy with another
        # job), were not tested: "unknown", never "failed", and nothing is drained on their account
        untested += [h for h in report.untested if h not in untested]
        verdict = "unknown" if untested and report.verdict.value != "faulty" else report.verdict.value
        ctx.outcome["probe"] = {"id": probe.id, "verdict": verdict, "faulty": report.faulty,
                                "slow": report.slow, **({"untested": untested} if untested else {})}
        return {"probe_id": probe.id, "verdict": verdict, "faulty": report.faulty, "untested": untested,
                "slow": report.slow, "reason": report.reason, "duration_s": round(report.duration_s, 3)}

    def _health(self, ctx: _StepContext, scheduler: Scheduler, step: Step) -> dict:
        """The checks of rules/probes.yaml on the hosts the log names, through the scheduler's
        launcher (srun -N1 -w host) or here for the local scheduler. A host fails when a check
        fails or hangs; a check that cannot run (tool not installed, node busy) is unknown."""
        if not self.health_probes:
            ctx.outcome["health"] = {"status": "not_run"}
            return {"_status": "skipped", "why": "no health probes are configured"}
        nodes = scheduler.nodes()
        names = map_hosts(step.hosts, nodes)
        hosts = [h for h in names.known if not nodes[h].drained]
        launcher = None
        if not getattr(scheduler, "local_probes", False):
            if hosts and scheduler.probe_command(hosts[:1], ["true"]) is None:
                ctx.outcome["health"] = {"status": "not_run", "unknown": hosts}
                return {"_status": "skipped", "why": f"health probes are not wired for the {scheduler.name} "
                        "scheduler; nothing is blamed"}
            launcher = scheduler.probe_command
        results = check_hosts(self.health_probes, hosts, launcher=launcher, env=self.health_env)
        status = {h: host_status(r) for h, r in results.items()}
        summary = {k: sorted(h for h, st in status.items() if st == v)
                   for k, v in (("failed", "fail"), ("passed", "pass"), ("unknown", "unknown"))}
        summary["unknown"] += [h for h in names.unknown if h not in summary["unknown"]]
        ctx.outcome["health"] = summary
        return {**summary, "checks": {h: [{"probe": c.probe_id, "status": c.status, "exit_code": c.exit_code,
                                           "duration_s": round(c.duration_s, 2), "output_tail": c.output_tail[-300:]}
                                          for c in r] for h, r in results.items()}}

    def _drain(self, ctx: _StepContext, scheduler: Scheduler, host: str, reason: str) -> dict:
        nodes = scheduler.nodes()
        if host not in nodes:
            return {"_status": "skipped", "why": f"{host} is not a node of the {scheduler.name} scheduler"}
        if nodes[host].drained:
            ctx.drained.add(host)
            return {"_status": "skipped", "why": f"{host} is already {nodes[host].state}"}
        breaker = self.rules.defaults.breaker
        total = ctx.node_count or len(nodes)
        with self.db.transaction() as session:
            recent = store.drained_hosts(session=session, cluster=ctx.cluster,
                                         since=self.clock() - timedelta(seconds=breaker.window_s))
        ok, allowed = breaker_allows(breaker, drained=recent | ctx.drained, host=host, total_nodes=total)
        if not ok:
            ctx.outcome.setdefault("breaker", []).append(host)
            return {"_status": "refused",
                    "why": f"circuit breaker: draining {host} would make {len(recent | ctx.drained) + 1} of "
                           f"{total} nodes drained within {breaker.window_s:.0f} s (limit "
                           f"{breaker.max_drain_share:.0%} = {allowed}); an admin must look"}
        scheduler.drain(host, reason=f"logdx: {reason} (job {ctx.external_id})"[:200])
        ctx.drained.add(host)
        ctx.outcome.setdefault("drained", []).append(host)
        return {"drained": host}

    def _requeue(self, ctx: _StepContext, scheduler: Scheduler, step: Step) -> dict:
        info = scheduler.job(ctx.external_id)
        # a job that is queued or running again was restarted already (a retried webhook with
        # another key, an operator): requeueing it again would kill a healthy run. Only a hang
        # restarts a job that is still running.
        if info.state in _QUEUED or (info.state == "RUNNING" and ctx.plan.action is not RecoveryAction.CAPTURE_AND_RESTART):
            return {"_status": "skipped", "why": f"job {ctx.external_id} is {info.state} already", "job_state": info.state}
        unproven = []
        if step.params.get("exclude_named"):
            # the hosts the log names for a hardware fault stay out of the restart even when no
            # probe convicted them (excluded for this job, not drained): a passed probe cannot
            # reproduce every fault, and restarting on the host the log blames risks the same failure
            known = map_hosts(step.params["exclude_named"], scheduler.nodes()).nodes
            unproven = [h for h in dict.fromkeys(known[n] for n in step.params["exclude_named"] if n in known)
                        if h not in ctx.exclude]
            ctx.exclude.extend(unproven)
            ctx.outcome["excluded_unproven"] = unproven
        short = self._capacity_short(ctx, scheduler, info)
        if short:
            ctx.outcome["not_requeued"] = short
            return {"_status": "refused", "why": short, "job_state": info.state}
        ckpt_dir = ctx.checkpoint_dir or info.checkpoint_dir
        before = step.params.get("before_step")
        choice = choose_checkpoint(ckpt_dir, before_step=before) if ckpt_dir else None
        skip = step.params.get("skip")
        spec = RestartSpec(checkpoint=choice.path if choice else None,
                           checkpoint_step=choice.step if choice else None,
                           skip_batches=tuple(skip) if skip else None,
                           exclude=tuple(dict.fromkeys(ctx.exclude)), reason=ctx.plan.reason,
                           restart_count=info.restarts + 1)
        if not ctx.dry_run and info.workdir:
            spec.write(info.workdir)
        scheduler.requeue(ctx.external_id, restart=spec, delay_s=float(step.params.get("delay_s") or 0.0))
        ctx.outcome["restart"] = {**asdict(spec), "delay_s": step.params.get("delay_s", 0.0)}
        return {"checkpoint": spec.checkpoint, "checkpoint_step": spec.checkpoint_step,
                "skip_batches": skip, "exclude": list(spec.exclude), "job_state_before": info.state,
                **({"excluded_unproven": unproven} if unproven else {}),
                "checkpoint_note": choice.note if choice else "no checkpoint directory known"}


    @staticmethod
    def _capacity_short(ctx: _StepContext, scheduler: Scheduler, info: JobInfo) -> str | None:
        """Why the job could not be scheduled again (too few usable nodes), or None. Usable: known
        to the scheduler, not drained or down, not excluded for this job."""
        need = info.node_count or len(info.nodes) or len(ctx.facts.job_hosts)
        if need <= 0:
            return None
        nodes = scheduler.nodes()
        excluded = set(ctx.exclude) | set(_exc_nodes(scheduler, info))
        usable = [n for n, node in nodes.items() if not node.drained and n not in excluded]
        if len(usable) >= need:
            return None
        return (f"not requeued: the job needs {need} nodes and only {len(usable)} of the {scheduler.name} "
                f"scheduler's {len(nodes)} are usable ({len(excluded)} excluded for it, "
                f"{sum(1 for n in nodes.values() if n.drained)} drained or down); an admin must look")


def _exc_nodes(scheduler: Scheduler, info: JobInfo) -> list[str]:
    """Nodes the job already excludes (Slurm's ExcNodeList), less those the controller excluded
    earlier that are back in service (the next requeue releases them)."""
    kept = getattr(scheduler, "kept_exclusions", None) or getattr(getattr(scheduler, "inner", None),
                                                                   "kept_exclusions", None)
    if kept is not None:
        return sorted(kept(info)[0])
    exc = info.raw.get("ExcNodeList", "") if isinstance(info.raw, dict) else ""
    expand = getattr(scheduler, "hostnames", None) or getattr(getattr(scheduler, "inner", None), "hostnames", None)
    if not exc or exc in ("(null)", "None") or expand is None:
        return []
    return list(expand(exc))


_QUEUED = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "CONFIGURING"})


class _StepContext:
    def __init__(self, *, job_id: int, diagnosis_id: int, run_id: int, cluster: str, external_id: str,
                 actor: str, dry_run: bool, facts: Facts, plan: Plan, checkpoint_dir: str | None,
                 node_count: int | None) -> None:
        self.job_id, self.diagnosis_id, self.run_id = job_id, diagnosis_id, run_id
        self.cluster, self.external_id, self.actor, self.dry_run = cluster, external_id, actor, dry_run
        self.facts, self.plan, self.checkpoint_dir, self.node_count = facts, plan, checkpoint_dir, node_count
        self.outcome: dict = {}
        self.drained: set[str] = set()
        self.exclude: list[str] = []


def _plan_json(plan: Plan) -> dict:
    return {"action": plan.action.value, "policy_id": plan.policy_id, "restart": plan.restart,
            "retry_number": plan.retry_number, "delay_s": plan.delay_s, "stopped": plan.stopped,
            "repeat_offenders": list(plan.repeat_offenders),
            "steps": [{"kind": s.kind.value, "hosts": list(s.hosts), "reason": s.reason, "params": s.params}
                      for s in plan.steps]}
