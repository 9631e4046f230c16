"""A local scheduler: jobs are subprocesses on this machine, 'nodes' are names in a state file.

For a single machine and the demo, and the reference the other adapters are tested against.
State (nodes, jobs) lives in one JSON file so that the CLI and the service see the same cluster;
a job's exit status is written by its wrapper shell into its work directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from app.controller.schedulers.base import RESTART_FILE, JobInfo, NodeInfo, RestartSpec, SchedulerError

_WRAPPER = 'sleep "$LOGDX_DELAY_S"; "$@"; echo $? > "$LOGDX_EXIT_FILE"'


class LocalScheduler:
    name = "local"
    local_probes = True  # its nodes are names on this machine: probe workers are local processes

    def __init__(self, state_dir: str | Path, nodes: Sequence[str] = ()) -> None:
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.state_file = self.state_dir / "local-scheduler.json"
        state = self._load()
        for node in nodes:
            state["nodes"].setdefault(node, {"state": "IDLE", "reason": None})
        self._save(state)

    def _load(self) -> dict:
        if self.state_file.is_file():
            return json.loads(self.state_file.read_text())
        return {"nodes": {}, "jobs": {}, "next_id": 1}

    def _save(self, state: dict) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(self.state_file)

    # -- jobs ------------------------------------------------------------------------------------
    def submit(self, argv: Sequence[str], *, workdir: str | Path, nodes: int,
               checkpoint_dir: str | None = None, env: dict[str, str] | None = None) -> str:
        state = self._load()
        job_id = str(state["next_id"])
        state["next_id"] += 1
        state["jobs"][job_id] = {"argv": list(argv), "workdir": str(workdir), "want": nodes,
                                 "checkpoint_dir": checkpoint_dir, "env": env or {}, "restarts": 0,
                                 "exclude": [], "pid": None, "nodes": []}
        self._start(state, job_id, delay_s=0.0)
        self._save(state)
        return job_id

    def _start(self, state: dict, job_id: str, *, delay_s: float) -> None:
        job = state["jobs"][job_id]
        free = [n for n, s in state["nodes"].items() if s["state"] not in ("DRAIN", "DOWN")
                and n not in job["exclude"]]
        if len(free) < job["want"]:
            raise SchedulerError(f"job {job_id} needs {job['want']} nodes, {len(free)} usable: {free}")
        job["nodes"] = free[:job["want"]]
        workdir = Path(job["workdir"])
        exit_file = workdir / f".logdx-exit-{job_id}-{job['restarts']}"
        exit_file.unlink(missing_ok=True)
        env = {**os.environ, **job["env"], "LOGDX_NODES": ",".join(job["nodes"]), "LOGDX_JOB_ID": job_id,
               "LOGDX_RESTART_COUNT": str(job["restarts"]), "LOGDX_RESTART_FILE": str(workdir / RESTART_FILE),
               "LOGDX_EXIT_FILE": str(exit_file), "LOGDX_DELAY_S": f"{delay_s:.3f}"}
        log = open(workdir / f"job-{job_id}.log", "ab")  # noqa: SIM115 - handed to the child
        proc = subprocess.Popen(["/bin/sh", "-c", _WRAPPER, "sh", *job["argv"]], cwd=workdir, env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        job.update(pid=proc.pid, exit_file=str(exit_file), started=time.time())

    def job(self, job_id: str) -> JobInfo:
        state = self._load()
        job = state["jobs"].get(job_id)
        if job is None:
            raise SchedulerError(f"no local job {job_id}")
        exit_file = Path(job.get("exit_file", ""))
        if exit_file.is_file() and exit_file.read_text().strip():
            code = int(exit_file.read_text().strip())
            st = "COMPLETED" if code == 0 else "FAILED"
        elif job["pid"] and _alive(job["pid"]):
            st = "RUNNING"
        else:
            st = "FAILED"
        return JobInfo(job_id=job_id, state=st, nodes=tuple(job["nodes"]), workdir=job["workdir"],
                       checkpoint_dir=job["checkpoint_dir"], restarts=job["restarts"], raw=job)

    def wait(self, job_id: str, *, timeout_s: float) -> JobInfo:
        deadline = time.monotonic() + timeout_s
        while True:
            info = self.job(job_id)
            if info.state != "RUNNING" or time.monotonic() > deadline:
                return info
            time.sleep(0.1)

    def requeue(self, job_id: str, *, restart: RestartSpec, delay_s: float = 0.0) -> None:
        state = self._load()
        job = state["jobs"].get(job_id)
        if job is None:
            raise SchedulerError(f"no local job {job_id}")
        if job["pid"] and _alive(job["pid"]):
            os.killpg(job["pid"], 15)
        job["exclude"] = sorted(set(job["exclude"]) | set(restart.exclude))
        job["restarts"] += 1
        self._start(state, job_id, delay_s=delay_s)
        self._save(state)

    def stack_dump(self, job_id: str, *, timeout_s: float = 30.0) -> dict[str, str]:
        """py-spy dumps of the job's Python processes (its process group), keyed by node list."""
        info = self.job(job_id)
        pid = info.raw.get("pid")
        if not pid or info.state != "RUNNING":
            return {}
        pids = subprocess.run(["pgrep", "-g", str(pid)], capture_output=True, text=True).stdout.split()
        dumps = []
        for p in pids:
            if p == str(pid):
                continue  # the wrapper shell
            out = subprocess.run([_py_spy(), "dump", "--pid", p], capture_output=True, text=True, timeout=timeout_s)
            dumps.append(out.stdout or out.stderr)
        return {",".join(info.nodes): "\n".join(dumps)[-20000:]}

    # -- nodes -----------------------------------------------------------------------------------
    def nodes(self) -> dict[str, NodeInfo]:
        return {n: NodeInfo(n, s["state"], s["reason"]) for n, s in self._load()["nodes"].items()}

    def drain(self, node: str, *, reason: str) -> None:
        self._set(node, "DRAIN", reason)

    def resume(self, node: str, *, reason: str) -> None:
        self._set(node, "IDLE", None)

    def _set(self, node: str, st: str, reason: str | None) -> None:
        state = self._load()
        if node not in state["nodes"]:
            raise SchedulerError(f"unknown node {node}")
        state["nodes"][node] = {"state": st, "reason": reason}
        self._save(state)

    def probe_command(self, nodes: Sequence[str], argv: Sequence[str]) -> list[str] | None:
        return None


def _py_spy() -> str:
    """py-spy from PATH, else next to this Python (a virtualenv's bin/)."""
    import shutil

    return shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of this process counts as dead
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return False


if __name__ == "__main__":  # pragma: no cover - debugging aid
    print(json.dumps(LocalScheduler(sys.argv[1])._load(), indent=1))
