"""Slurm through its own commands (scontrol, srun): drain/resume a node with a reason, requeue a
job without some nodes, read job and node state, launch probe workers with srun.

`scontrol show ... -o` prints one record per line as `Key=Value` pairs separated by spaces, but
values may contain spaces (Reason, Comment, Command, WorkDir): a value runs until the next
` Key=` whose key looks like a Slurm field name. Slurm holds a requeued batch job for about two
minutes (its begin time is pushed back); the adapter resets the start time of a job that ended
(unless a backoff delay asks for a later one), but not of one requeued while running (a hang):
its credential is revoked on its nodes for AuthInfo's cred_expire (120 s by default) and an
earlier start fails, so that hold is the site's setting.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections.abc import Sequence

from app.controller.schedulers.base import JobInfo, NodeInfo, RestartSpec, SchedulerError

_NOT_ENDED = frozenset({"RUNNING", "PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING",
                        "SUSPENDED", "RESIZING", "SIGNALING", "STAGE_OUT"})
_KEY = re.compile(r"(?:^|\s)([A-Z][A-Za-z0-9_:/]*)=")
CKPT_COMMENT = re.compile(r"logdx_ckpt=(\S+)")
# the nodes the controller added to a job's ExcNodeList, kept in its Comment: once such a node is
# back in service (repaired, resumed) the next requeue lets the job use it again
EXC_COMMENT = re.compile(r"\s*logdx_exc=(\S*)")


def parse_record(line: str) -> dict[str, str]:
    """One `scontrol show -o` record as a dict (values keep their inner spaces)."""
    matches = list(_KEY.finditer(line))
    out: dict[str, str] = {}
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out.setdefault(m.group(1), line[m.end():end].strip())
    return out


class SlurmScheduler:
    name = "slurm"

    def __init__(self, *, conf: str | None = None, timeout_s: float = 30.0, probe_time_limit: str = "5",
                 probe_immediate_s: int = 10, probe_args: Sequence[str] = ()) -> None:
        self.env = {**os.environ, **({"SLURM_CONF": conf} if conf else {})}
        self.timeout_s = timeout_s
        self.probe_time_limit = probe_time_limit
        self.probe_immediate_s = probe_immediate_s
        # site flags for the probe's srun, e.g. ["--gpus-per-node=8"] where GPUs are a gres
        self.probe_args = list(probe_args)

    def _run(self, *argv: str) -> str:
        try:
            proc = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=self.timeout_s)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SchedulerError(f"{' '.join(argv)}: {exc}") from exc
        if proc.returncode != 0:
            raise SchedulerError(f"{' '.join(argv)}: exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[:500]}")
        return proc.stdout

    def hostnames(self, nodelist: str) -> list[str]:
        if not nodelist or nodelist in ("(null)", "None"):
            return []
        return self._run("scontrol", "show", "hostnames", nodelist).split()

    def job(self, job_id: str) -> JobInfo:
        lines = [ln for ln in self._run("scontrol", "show", "job", "-o", str(job_id)).splitlines() if ln.strip()]
        if not lines:
            raise SchedulerError(f"no Slurm job {job_id}")
        rec = parse_record(lines[0])
        nodes = rec.get("NodeList", "")
        if nodes in ("", "(null)"):
            nodes = rec.get("BatchHost", "")
        ckpt = CKPT_COMMENT.search(rec.get("Comment", ""))
        state = rec.get("JobState", "UNKNOWN").upper()
        # a running or queued job shows ExitCode=0:0 too: it says how the job ended only once it has
        exit_code = rec.get("ExitCode") if state not in _NOT_ENDED else None
        reason = rec.get("Reason")
        return JobInfo(job_id=str(job_id), state=state,
                       nodes=tuple(self.hostnames(nodes)), workdir=rec.get("WorkDir"),
                       checkpoint_dir=ckpt.group(1) if ckpt else None,
                       restarts=int(rec.get("Restarts", "0") or 0),
                       node_count=int(m.group(1)) if (m := re.match(r"(\d+)", rec.get("NumNodes", ""))) else 0,
                       exit_code=exit_code if exit_code and ":" in exit_code else None,
                       reason=reason if reason not in (None, "", "None", "(null)") else None, raw=rec)

    def nodes(self) -> dict[str, NodeInfo]:
        out = {}
        for line in self._run("scontrol", "show", "node", "-o").splitlines():
            if not line.strip():
                continue
            rec = parse_record(line)
            reason = rec.get("Reason")
            out[rec["NodeName"]] = NodeInfo(rec["NodeName"], rec.get("State", "UNKNOWN").upper(),
                                            reason if reason not in (None, "(null)", "") else None)
        return out

    def drain(self, node: str, *, reason: str) -> None:
        self._run("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}")

    def resume(self, node: str, *, reason: str) -> None:
        self._run("scontrol", "update", f"NodeName={node}", "State=RESUME")

    def kept_exclusions(self, info: JobInfo, nodes: dict[str, NodeInfo] | None = None) -> tuple[set[str], set[str]]:
        """(the job's ExcNodeList as it stays, the part of it the controller added). A node the
        controller excluded earlier that is back in service is released; the job's own
        exclusions (from its submission) are kept as they are."""
        old = set(self.hostnames(info.raw.get("ExcNodeList", "")))
        m = EXC_COMMENT.search(info.raw.get("Comment", "") or "")
        ours = {h for h in (m.group(1).split(",") if m else []) if h} & old
        if ours:
            nodes = nodes if nodes is not None else self.nodes()
            ours = {h for h in ours if h not in nodes or nodes[h].drained}
        return (old - set(m.group(1).split(",") if m else ())) | ours, ours

    def requeue(self, job_id: str, *, restart: RestartSpec, delay_s: float = 0.0) -> None:
        info = self.job(job_id)
        if info.state not in ("PENDING", "REQUEUED"):
            self._run("scontrol", "requeue", str(job_id))
        kept, ours = self.kept_exclusions(info)
        ours |= set(restart.exclude) - kept
        excluded = kept | set(restart.exclude)
        updates = [f"JobId={job_id}", f"ExcNodeList={','.join(sorted(excluded))}"]
        comment = EXC_COMMENT.sub("", info.raw.get("Comment", "") or "")
        comment = comment if comment not in ("(null)", "None") else ""
        if ours or EXC_COMMENT.search(info.raw.get("Comment", "") or ""):
            comment = (comment + (f" logdx_exc={','.join(sorted(ours))}" if ours else "")).strip()
            updates.append(f"Comment={comment}")
        start = "now" if delay_s <= 0 else f"now+{int(round(delay_s))}"
        updates.append(f"StartTime={start}")
        self._run("scontrol", "update", *updates)
        if info.state == "COMPLETING":
            # asked from EpilogSlurmctld: Slurm requeues (and holds ~120 s) only once the epilog
            # has ended, after this update; set the start time again once the job is pending.
            # Not for a job requeued while RUNNING (a hang): Slurm revoked its credential on its
            # nodes and holds it for the credential's lifetime (AuthInfo cred_expire, 120 s by
            # default); started sooner it fails at once ("Job credential revoked")
            threading.Thread(target=self._start_when_pending, args=(job_id, updates), daemon=True,
                             name=f"slurm-requeue-{job_id}").start()

    def _start_when_pending(self, job_id: str, updates: list[str], timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                if self.job(job_id).state in ("PENDING", "REQUEUED"):
                    self._run("scontrol", "update", *updates)
                    return
            except SchedulerError:
                return

    def stack_dump(self, job_id: str, *, timeout_s: float = 60.0) -> dict[str, str]:
        """py-spy dumps of the job's processes on each node (`scontrol listpids` there), through an
        overlapping step of the job itself."""
        info = self.job(job_id)
        if info.state != "RUNNING":
            return {}
        script = ('for p in $(scontrol listpids "$SLURM_JOB_ID" 2>/dev/null | awk \'NR>1 && $1 ~ /^[0-9]+$/ {print $1}\'); '
                  'do py-spy dump --pid "$p" 2>/dev/null; done')
        out = {}
        for node in info.nodes:
            try:
                out[node] = self._run("srun", f"--jobid={job_id}", "--overlap", "-N1", "-n1", "-w", node,
                                      "sh", "-c", script)[-20000:]
            except SchedulerError as exc:
                out[node] = f"no dump: {exc}"
        return out

    def probe_command(self, nodes: Sequence[str], argv: Sequence[str], *, tasks_per_node: int = 1) -> list[str] | None:
        # --immediate: a node busy with another job (exclusive nodes) cannot be probed now; srun
        # gives up after that many seconds instead of waiting, and the group did not run
        # one task per GPU (tasks_per_node); --overcommit: the probe's tasks are light and a node
        # with fewer CPUs configured than GPUs (or a CPU test cluster) must still run them all
        return ["srun", "-N", str(len(nodes)), "-w", ",".join(nodes), f"--ntasks-per-node={tasks_per_node}",
                *(["--overcommit"] if tasks_per_node > 1 else []), *self.probe_args,
                f"--immediate={self.probe_immediate_s}",
                "--kill-on-bad-exit=1", "-J", "logdx-probe", f"--time={self.probe_time_limit}",
                "--export=ALL", *argv]
