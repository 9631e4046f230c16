"""The restart controller's record of a job as sentences for the job page: node probes (which hosts
were tested, how each fared, which was faulty) and recovery runs (what was planned, what was done,
what was refused and why). Pure: rows in (`probe_runs`, `recovery_runs`, `controller_actions`),
plain data out; the page keeps the raw JSON behind a fold."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class HostResult:
    host: str
    verdict: str  # faulty | slow | passed | not settled
    note: str = ""


@dataclass(frozen=True)
class ProbeView:
    id: int
    when: Any
    verdict: str
    summary: str
    hosts: list[HostResult]
    raw: dict


@dataclass
class Sentence:
    text: str
    status: str  # done | refused | skipped | failed | sending | planned
    raw: dict = field(default_factory=dict)


@dataclass
class RunView:
    id: int
    when: Any
    status: str
    dry_run: bool
    planned: str
    steps: list[str]
    sentences: list[Sentence]
    raw: dict


def _hosts(names: list[str], limit: int = 8) -> str:
    names = [str(n) for n in names]
    if len(names) <= limit:
        return ", ".join(names)
    return f"{', '.join(names[:limit])} and {len(names) - limit} more"


def probe_view(row: Any) -> ProbeView:
    """One `probe_runs` row: the verdict in words and a verdict per tested host."""
    result = row.result or {}
    faulty, slow = list(row.faulty or []), list(row.slow or [])
    healthy = set(result.get("healthy") or [])
    hosts = []
    for host in row.hosts or []:
        if host in faulty:
            hosts.append(HostResult(host, "faulty", "failed both rounds of the allgather test"))
        elif host in slow:
            hosts.append(HostResult(host, "slow", "passed, but far slower than the others (a straggler, not drained)"))
        elif host in healthy:
            hosts.append(HostResult(host, "passed"))
        else:
            hosts.append(HostResult(host, "not settled"))
    tested = f"Tested {len(row.hosts or [])} host{'s' if len(row.hosts or []) != 1 else ''} ({_hosts(row.hosts or [])})"
    if row.verdict == "faulty" and faulty:
        summary = f"{tested}: {_hosts(faulty)} found faulty."
    elif row.verdict == "ok":
        summary = f"{tested}: all passed."
    else:
        summary = f"{tested}: inconclusive."
    if slow:
        summary += f" Slow: {_hosts(slow)}."
    if result.get("reason"):
        summary += f" {result['reason']}"
    return ProbeView(id=row.id, when=row.created_at, verdict=row.verdict, summary=summary, hosts=hosts,
                     raw={"hosts": row.hosts, "verdict": row.verdict, "faulty": faulty, "slow": slow,
                          "duration_s": row.duration_s, "result": result})


def _step_text(step: dict) -> str:
    kind, hosts, reason = step.get("kind", "?"), step.get("hosts") or [], step.get("reason") or ""
    where = f" {_hosts(hosts)}" if hosts else (" the hosts the probe finds faulty" if kind == "drain" else "")
    verb = {"probe": "probe", "drain": "drain", "capture": "capture evidence on", "requeue": "requeue the job",
            "notify": f"notify the {(step.get('params') or {}).get('to', 'admin')}"}.get(kind, kind)
    return f"{verb}{where}" + (f": {reason}" if reason else "")


def _why(result: dict) -> str:
    return result.get("why") or result.get("error") or result.get("reason") or ""


def _action_sentence(action: Any) -> str | None:
    """What one audited step did, or None for the plan itself (shown apart)."""
    params, result, status = action.params or {}, action.result or {}, action.status
    kind, why = action.kind, _why(action.result or {})
    if kind == "decide":
        return None
    if kind == "probe":
        hosts = params.get("hosts") or []
        if status == "skipped":
            return f"Did not probe {_hosts(hosts)}: {why}" if hosts else f"Did not probe: {why}"
        if status == "failed":
            return f"The probe of {_hosts(hosts)} failed: {why}"
        faulty = result.get("faulty") or []
        verdict = result.get("verdict")
        if faulty:
            return f"Probed {_hosts(hosts)} with the allgather test: {_hosts(faulty)} faulty."
        if verdict == "ok":
            return f"Probed {_hosts(hosts)} with the allgather test: all passed."
        return f"Probed {_hosts(hosts)} with the allgather test: {verdict or 'no verdict'}."
    if kind == "drain":
        host = params.get("host", "?")
        return {"done": f"Drained {host}: {params.get('reason', '')}".rstrip(": "),
                "refused": f"Refused to drain {host}: {why}",
                "skipped": f"Did not drain {host}: {why}",
                "failed": f"Draining {host} failed: {why}"}.get(status, f"Drain {host}: {status}")
    if kind == "requeue":
        if status == "done":
            ckpt = result.get("checkpoint")
            text = "Requeued the job"
            text += (f" from checkpoint {ckpt}" + (f" (step {result['checkpoint_step']})"
                                                   if result.get("checkpoint_step") is not None else "")
                     if ckpt else " with no checkpoint")
            if result.get("exclude"):
                text += f", excluding {_hosts(result['exclude'])}"
            return text + "."
        return {"refused": f"Refused to requeue the job: {why}", "skipped": f"Did not requeue the job: {why}",
                "failed": f"Requeueing the job failed: {why}"}.get(status, f"Requeue: {status}")
    if kind == "capture":
        dumps = result.get("stack_dumps")
        return ("Captured the last progress" + (f" (step {result['last_step']})" if result.get("last_step") is not None
                                                else "") + (f"; stack dumps: {dumps}" if isinstance(dumps, str) else "")
                if status == "done" else f"Capture {status}: {why}")
    if kind == "notify":
        delivery = result.get("delivery")
        if isinstance(delivery, dict):
            delivery = "delivered" if delivery.get("delivered") else f"not delivered ({delivery.get('error')})"
        to = result.get("notified") or params.get("to", "admin")
        return f"Notified the {to}" + (f": {delivery}" if delivery else "") + (f" ({status})" if status != "done" else "")
    label = kind.replace("_", " ")
    return f"{label.capitalize()} {status}" + (f": {why}" if why else "")


def run_view(run: Any, actions: list[Any]) -> RunView:
    """A `recovery_runs` row with the audited steps that carry its id, oldest first."""
    plan = run.plan or {}
    action = str(run.action or plan.get("action") or "").replace("_", " ")
    planned = f"Planned: {action} (policy {run.policy_id}" + (
        f", restart {run.retry_number}" if plan.get("restart") else "") + ")"
    if plan.get("stopped"):
        planned += f"; stopped restarting: {plan['stopped']}"
    elif run.reason:
        planned += f": {run.reason}"
    mine = sorted((a for a in actions if (a.params or {}).get("run_id") == run.id), key=lambda a: a.id)
    sentences = []
    for a in mine:
        text = _action_sentence(a)
        if text:
            sentences.append(Sentence(text=text, status=a.status,
                                      raw={"kind": a.kind, "status": a.status, "params": a.params, "result": a.result}))
    if (run.outcome or {}).get("error"):
        sentences.append(Sentence(text=f"The run failed: {run.outcome['error']}", status="failed"))
    return RunView(id=run.id, when=run.created_at, status=run.status, dry_run=bool(run.dry_run), planned=planned,
                   steps=[_step_text(s) for s in plan.get("steps") or []], sentences=sentences,
                   raw={"plan": plan, "outcome": run.outcome, "reason": run.reason})
