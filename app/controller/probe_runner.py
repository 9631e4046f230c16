"""Runs the two-round probe on real process groups: the controller hosts the rendezvous store
(a torch TCPStore), starts the workers (locally, through the scheduler's launcher: `srun -N2 -w
a,b ...`, or one pod per node) and enforces the deadlines; a group that started and does not
report in time has failed, a group none of whose workers started (its nodes were busy) did not
run and blames nobody. The rounds themselves are planned by app/controller/probe_plan.py."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import timedelta

from app.controller.probe_plan import GroupResult, ProbeReport, Verdict, run_two_rounds

WORKER = [sys.executable, "-m", "app.controller.probe_worker"]


class ProbeStore:
    """The rendezvous store every probe worker connects to (listens on `host`:`port`)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        import torch.distributed as dist

        self.store = dist.TCPStore(host, port, is_master=True, wait_for_workers=False,
                                   timeout=timedelta(seconds=3600))
        self.host = host
        self.port = self.store.port

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def collect(self, groups: dict[str, tuple[str, ...]], *, start_by: float, run_s: float,
                poll_s: float = 0.05, ended: Callable[[str], bool] | None = None,
                per_node: int = 1) -> dict[str, GroupResult]:
        """Wait for every rank's result (`per_node` ranks on each member, rank r on member
        r // per_node). A group that started (a worker wrote `started/{rank}` on joining) fails as
        soon as one rank reports a failure, when its launcher `ended` without every rank
        reporting, and when a rank has not reported `run_s` after the group started. A group no
        worker of which started, by `start_by` (monotonic) or before its launcher ended, did not
        run: the scheduler never gave it its nodes, which is no evidence against them."""
        done: dict[str, GroupResult] = {}
        started_at: dict[str, float] = {}
        while True:
            now = time.monotonic()
            for key, members in groups.items():
                if key in done:
                    continue
                gone = ended is not None and ended(key)
                ranks = [members[r // per_node] for r in range(len(members) * per_node)]
                if key not in started_at and any(self.store.check([f"{key}/started/{r}"]) for r in range(len(ranks))):
                    started_at[key] = now
                results = {}
                for rank in range(len(ranks)):
                    k = f"{key}/result/{rank}"
                    if self.store.check([k]):
                        results[rank] = json.loads(self.store.get(k))
                failed = [r for r in results.values() if not r["ok"]]
                reported = tuple(dict.fromkeys(ranks[r] for r in sorted(results)))
                if not failed and len(results) < len(ranks) and key not in started_at and (gone or now > start_by):
                    why = "the launcher ended" if gone else "none in time"
                    done[key] = GroupResult(members, False, 0.0, f"not run: no worker started ({why})",
                                            reported, ran=False)
                    continue
                if gone and not failed and len(results) < len(ranks):
                    silent = [n for r, n in enumerate(ranks) if r not in results]
                    failed = [{"node": n, "ok": False, "error": "exited without a result"} for n in dict.fromkeys(silent)]
                if not failed and len(results) < len(ranks) and now > started_at.get(key, now) + run_s:
                    silent = list(dict.fromkeys(n for r, n in enumerate(ranks) if r not in results))
                    done[key] = GroupResult(members, False, 0.0, f"timed out: no result from {silent}", reported)
                    continue
                if failed or len(results) == len(ranks):
                    elapsed = max((r.get("elapsed_s", 0.0) for r in results.values()), default=0.0)
                    err = "; ".join(f"{r['node']}: {r.get('error', '')}" for r in failed)
                    done[key] = GroupResult(members, not failed, elapsed, err, reported)
            if len(done) == len(groups):
                return done
            time.sleep(poll_s)


class LocalProbeCluster:
    """One long-lived worker process per node name on this machine (spawned, never forked), or
    `per_node` of them (a node's GPUs; processes on CPU).

    Faults can be injected per node (`faults={"n3": "hang"}`) for tests and the demo."""

    def __init__(self, nodes: Sequence[str], *, timeout_s: float = 10.0, nbytes: int = 1 << 20,
                 faults: dict[str, str] | None = None, port: int = 0, per_node: int = 1) -> None:
        self.nodes = list(nodes)
        self.timeout_s = timeout_s
        self.nbytes = nbytes
        self.per_node = max(1, per_node)
        self.store = ProbeStore(port=port)
        self.agents = [f"{n}/{i}" for n in self.nodes for i in range(self.per_node)]
        self.seq = dict.fromkeys(self.agents, 0)
        self.run_id = uuid.uuid4().hex[:8]
        self.counter = itertools.count()
        env = {**os.environ, "LOGDX_PROBE_FAULTS": ",".join(f"{n}={f}" for n, f in (faults or {}).items()),
               "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", "lo")}
        self.procs = {a: subprocess.Popen([*WORKER, "agent", "--store", self.store.address, "--node", a.split("/")[0],
                                           "--per-node", str(self.per_node), "--local-rank", a.split("/")[1]],
                                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                          start_new_session=True)
                      for a in self.agents}

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(self.store.store.check([f"agent/{a}"]) for a in self.agents):
                return
            time.sleep(0.1)
        raise TimeoutError("probe agents did not start")

    def run_batch(self, round_no: int, groups: list[tuple[str, ...]]) -> list[GroupResult]:
        keys = {}
        for members in groups:
            key = f"{self.run_id}/{next(self.counter)}/r{round_no}"
            keys[key] = members
            for rank, node in enumerate(members):
                task = {"group": key, "rank": rank, "world": len(members), "timeout": self.timeout_s,
                        "bytes": self.nbytes}
                for agent in (f"{node}/{i}" for i in range(self.per_node)):
                    self.store.store.set(f"assign/{agent}/{self.seq[agent]}", json.dumps(task))
                    self.seq[agent] += 1
        # a node still finishing a failed group of the previous round starts late by up to
        # init + collective; once started, init and the collective each may take the timeout
        results = self.store.collect(keys, start_by=time.monotonic() + 3 * self.timeout_s + 5,
                                     run_s=2 * self.timeout_s + 5, per_node=self.per_node)
        return [results[k] for k in keys]

    def probe(self, hosts: Sequence[str] | None = None, *, suspects: Sequence[str] = (),
              **kwargs) -> ProbeReport:
        return run_two_rounds(list(hosts or self.nodes), self.run_batch, suspects=suspects, **kwargs)

    def close(self) -> None:
        for agent, proc in self.procs.items():
            if proc.poll() is None:
                self.store.store.set(f"assign/{agent}/{self.seq[agent]}", json.dumps({"stop": True}))
        deadline = time.monotonic() + 5
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            if proc.stderr:
                proc.stderr.close()

    def __enter__(self) -> LocalProbeCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CommandProbeRunner:
    """Starts one worker command per group through the scheduler (`srun -N2 -w a,b ...`) and
    kills what is still running at the deadline.

    The collective's deadline runs from the moment a worker started, not from the launch: the
    scheduler's allocation wait (busy nodes) is bounded by `start_timeout_s` and by the
    launcher itself (Slurm: `srun --immediate`), and a group that never started did not run."""

    def __init__(self, launcher, *, timeout_s: float = 30.0, nbytes: int = 1 << 20,  # noqa: ANN001
                 host: str = "127.0.0.1", port: int = 0, env: dict[str, str] | None = None,
                 python: str = sys.executable, start_timeout_s: float = 60.0, per_node: int = 1) -> None:
        self.launcher = launcher  # (nodes, argv, tasks_per_node=) -> argv
        self.per_node = max(1, per_node)
        self.timeout_s = timeout_s
        self.start_timeout_s = start_timeout_s
        self.nbytes = nbytes
        self.store = ProbeStore(host=host, port=port)
        self.env = {**os.environ, **(env or {})}
        self.python = python
        self.run_id = uuid.uuid4().hex[:8]
        self.counter = itertools.count()

    def run_batch(self, round_no: int, groups: list[tuple[str, ...]]) -> list[GroupResult]:
        keys, procs, errs = {}, {}, {}
        for members in groups:
            key = f"{self.run_id}/{next(self.counter)}/r{round_no}"
            keys[key] = members
            argv = [self.python, "-m", "app.controller.probe_worker", "once", "--store", self.store.address,
                    "--group", key, "--nodes", ",".join(members), "--timeout", str(self.timeout_s),
                    "--bytes", str(self.nbytes), "--per-node", str(self.per_node)]
            errs[key] = tempfile.TemporaryFile()
            launch = (self.launcher(members, argv, tasks_per_node=self.per_node) if self.per_node > 1
                      else self.launcher(members, argv))
            procs[key] = subprocess.Popen(launch, env=self.env, stdout=subprocess.DEVNULL,
                                          stderr=errs[key], start_new_session=True)
        # a launcher that ended (srun kills the group when a member exits, and gives up when it
        # gets no allocation) settles its group at once
        results = self.store.collect(keys, start_by=time.monotonic() + self.start_timeout_s,
                                     run_s=2 * self.timeout_s + 5, ended=lambda k: procs[k].poll() is not None,
                                     per_node=self.per_node)
        for key, proc in procs.items():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            if not results[key].ran:
                # the launcher's own words say why (srun: "Requested nodes are busy")
                errs[key].seek(0)
                tail = errs[key].read()[-400:].decode("utf-8", "replace").strip().replace("\n", "; ")
                if tail:
                    results[key] = replace(results[key], error=f"{results[key].error}: {tail}")
            errs[key].close()
        return [results[k] for k in keys]

    def probe(self, hosts: Sequence[str], *, suspects: Sequence[str] = (), **kwargs) -> ProbeReport:
        return run_two_rounds(list(hosts), self.run_batch, suspects=suspects, **kwargs)


class SchedulerProber:
    """The controller's prober: through the scheduler's launcher when it has one (Slurm, pods),
    else local worker processes (the local scheduler's nodes are names on this machine)."""

    def __init__(self, *, timeout_s: float = 30.0, nbytes: int = 1 << 20, host: str = "127.0.0.1",
                 port: int = 0, env: dict[str, str] | None = None, per_node: int = 1) -> None:
        self.timeout_s, self.nbytes, self.host, self.port, self.env = timeout_s, nbytes, host, port, env
        self.per_node = max(1, per_node)  # ranks per node: one per GPU

    def __call__(self, scheduler, hosts: Sequence[str], *, suspects: Sequence[str] = ()) -> ProbeReport:  # noqa: ANN001
        hosts = list(hosts)
        if not getattr(scheduler, "local_probes", False) and scheduler.probe_command(hosts[:2], ["true"]) is None:
            return ProbeReport(Verdict.INCONCLUSIVE, [], [], [],
                               f"probes are not wired for the {scheduler.name} scheduler; nothing is blamed")
        # idle nodes outside the job are the known-good partners when every group of the job fails
        # (two-node jobs above all); a node not idle is busy or suspect and is left alone
        reference = [n for n, info in scheduler.nodes().items()
                     if n not in hosts and not info.drained and info.state.startswith("IDLE")][:2]
        if getattr(scheduler, "local_probes", False):
            with LocalProbeCluster(hosts + reference, timeout_s=self.timeout_s, nbytes=self.nbytes,
                                   port=self.port, faults=_faults(self.env), per_node=self.per_node) as cluster:
                cluster.wait_ready()
                return cluster.probe(hosts, suspects=suspects, reference=reference)
        runner = CommandProbeRunner(scheduler.probe_command, timeout_s=self.timeout_s, nbytes=self.nbytes,
                                    host=self.host, port=self.port, env=self.env, per_node=self.per_node)
        return runner.probe(hosts, suspects=suspects, reference=reference)


def _faults(env: dict[str, str] | None) -> dict[str, str]:
    spec = (env or {}).get("LOGDX_PROBE_FAULTS") or os.environ.get("LOGDX_PROBE_FAULTS", "")
    return dict(item.split("=", 1) for item in spec.split(",") if "=" in item)
