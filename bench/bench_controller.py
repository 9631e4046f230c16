"""Restart-controller figures (bench/README.md):

  probe      probe time per round, 8 and 16 local 'nodes' on real gloo groups (no fault, one fault)
  fp         false positives over N fault-free probe runs (8 nodes, workers reused)
  stall      stall detection delay of `logdx watch` on a live log
  slurm      diagnosis -> restart on the local Slurm cluster (probe + drain + requeue); needs
             SLURM_CONF from `eval "$(.ci/slurm.sh)"`

    python bench/bench_controller.py probe fp stall slurm
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PORT = int(os.environ.get("LOGDX_BENCH_PORT", "18380"))
_ports = iter(range(PORT + 3, PORT + 20))  # a fresh port per store: a closed one lingers in TIME_WAIT


def bench_probe() -> dict:
    from app.controller.probe_runner import LocalProbeCluster

    out = {}
    for n in (8, 16):
        for faults in ({}, {f"n{n - 3:02d}": "exit_before"}):
            t0 = time.monotonic()
            with LocalProbeCluster([f"n{i:02d}" for i in range(n)], timeout_s=5, nbytes=1 << 20,
                                   faults=faults, port=next(_ports)) as c:
                c.wait_ready()
                start_s = time.monotonic() - t0
                report = c.probe()
            key = f"{n} nodes, {'one fault' if faults else 'no fault'}"
            out[key] = {"worker_start_s": round(start_s, 1), "round_s": [round(t, 2) for t in report.round_s],
                        "faulty": report.faulty}
            print(key, out[key], flush=True)
    return out


def bench_fp(runs: int = 50) -> dict:
    from app.controller.probe_runner import LocalProbeCluster

    fps, times = 0, []
    with LocalProbeCluster([f"n{i}" for i in range(8)], timeout_s=5, nbytes=1 << 20, port=PORT + 1) as c:
        c.wait_ready()
        for _ in range(runs):
            report = c.probe()
            times.append(report.duration_s)
            fps += bool(report.faulty or report.slow or report.verdict.value != "ok")
    out = {"runs": runs, "false_positives": fps, "median_probe_s": round(statistics.median(times), 3)}
    print(out, flush=True)
    return out


WRITER = r"""
import sys, time
path, n, dt = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
with open(path, "a") as f:
    for i in range(n):
        f.write(f"iter {i}: loss 3.2145, time {dt * 1000:.2f}ms, mfu 45.67%\n"); f.flush()
        time.sleep(dt)
print(time.time())
"""


def bench_stall(step_s: float = 0.5, factor: float = 5.0, floor_s: float = 1.0) -> dict:
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "train.log"
        log.write_text("")
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(log), "20", str(step_s)],
                                  stdout=subprocess.PIPE, text=True)
        watch = subprocess.Popen([sys.executable, "-m", "app.cli", "watch", str(log), "--factor", str(factor),
                                  "--floor", str(floor_s), "--interval", "0.1", "--exit-on-stall"],
                                 stdout=subprocess.PIPE, text=True)
        last_write = float(writer.communicate()[0].strip()) - step_s  # the writer sleeps after its last line
        alert_line = watch.stdout.readline()
        alerted = time.time()
        watch.wait()
    alert = json.loads(alert_line)
    out = {"step_s": step_s, "factor": factor, "floor_s": floor_s, "limit_s": round(alert["limit_s"], 2),
           "detection_delay_s": round(alerted - last_write, 2)}
    print(out, flush=True)
    return out


def bench_slurm() -> dict:
    import subprocess as sp

    from fastapi.testclient import TestClient

    from app.api.app import create_app
    from app.auth.models import TokenRole
    from app.auth.service import create_token
    from app.controller import store
    from app.controller.probe_runner import SchedulerProber
    from app.controller.recovery import load_recovery_rules
    from app.controller.schedulers.slurm import SlurmScheduler
    from app.controller.service import Controller
    from app.settings import Settings
    from tests.controller.slurm_job import write_job

    slurm = SlurmScheduler(conf=os.environ["SLURM_CONF"])
    for n in slurm.nodes():
        sp.run(["scontrol", "update", f"NodeName={n}", "State=RESUME"], env=slurm.env, capture_output=True)
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        settings = Settings(data_dir=work / "data", diagnosis_executor="thread")
        app = create_app(settings)
        with TestClient(app) as client:
            db = app.state.services.db
            hdr = {"Authorization": f"Bearer {db.run(create_token, role=TokenRole.SCHEDULER, name='bench')[1]}"}
            ext = sp.run(["sbatch", "--parsable", "-N", "2", "--requeue", "-D", str(work), "-o",
                          str(work / "job-%j.log"), "--comment", f"logdx_ckpt={work / 'ckpt'}",
                          str(write_job(work)), "xid", "1"], env=slurm.env, capture_output=True, text=True,
                         check=True).stdout.strip()
            while slurm.job(ext).state not in ("FAILED", "COMPLETED"):
                time.sleep(0.2)
            info = slurm.job(ext)
            bad = info.nodes[-1]
            job = client.post("/v1/jobs", json={"cluster": "bench", "external_id": ext, "hosts": list(info.nodes),
                                                "state": "failed"}, headers=hdr).json()["id"]
            client.put(f"/v1/jobs/{job}/log", content=(work / f"job-{ext}.log").read_bytes(), headers=hdr)
            t_diag = time.monotonic()
            client.post(f"/v1/jobs/{job}/diagnoses", headers=hdr)
            diag_s = time.monotonic() - t_diag
            db.run(store.set_cluster_control, cluster="bench", actions_enabled=True, actor="bench", node_count=4)
            ctl = Controller(db=db, rules=load_recovery_rules(), scheduler_for=lambda j: slurm,
                             prober=SchedulerProber(timeout_s=5, port=PORT + 2,
                                                    env={"LOGDX_PROBE_FAULTS": f"{bad}=exit_before"}))
            import torch.distributed  # noqa: F401 - a running service has imported it already

            t0 = time.monotonic()
            run = ctl.recover(job_id=job, actor="bench")
            recover_s = time.monotonic() - t0
            while slurm.job(ext).state not in ("RUNNING", "COMPLETED"):
                time.sleep(0.1)
            restart_s = time.monotonic() - t0
    for n in slurm.nodes():
        sp.run(["scontrol", "update", f"NodeName={n}", "State=RESUME"], env=slurm.env, capture_output=True)
    out = {"diagnose_s": round(diag_s, 2), "probe_drain_requeue_s": round(recover_s, 2),
           "diagnosis_to_running_s": round(restart_s, 2), "drained": run.outcome.get("drained"),
           "probe_s": run.outcome.get("probe")}
    print(out, flush=True)
    return out


if __name__ == "__main__":
    which = sys.argv[1:] or ["probe", "fp", "stall"]
    results = {name: globals()[f"bench_{name}"]() for name in which}
    print(json.dumps(results, indent=1))
