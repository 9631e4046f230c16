"""logdx deployed as a site would run it, on the local Slurm cluster (.ci/slurm.sh): `logdx serve`
(SQLite in a temp dir) with the Slurm scheduler, the live watch and the controller enabled for the
cluster; the Slurm epilog (EpilogSlurmctld hook running examples/slurm_epilog.sh with
LOGDX_RECOVER=1); a local object store; the checkpoint directory on a small tmpfs.

The recovery policy is the shipped rules/recovery.yaml with its clock compressed (`campaign_rules`):
the benchmark's steps take 0.15 s where a real job's take seconds, so waits measured in minutes
there are seconds here. Everything else (diagnosis rules, probes, drain, requeue) is as shipped.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SRC = Path(__file__).resolve().parent
CLUSTER = "logdx"  # slurm.conf's ClusterName: SLURM_CLUSTER_NAME in the epilog
SLURM_DIR = Path(os.environ.get("LOGDX_SLURM_DIR", "/tmp/logdx-slurm"))
NODES = ["node1", "node2", "node3", "node4"]
HOOK = SLURM_DIR / "epilog.d" / "50-logdx-chaos"


def campaign_rules() -> dict:
    """rules/recovery.yaml on the benchmark's clock: backoffs /10 (30 s -> 3 s), the stall floor
    120 s -> 10 s (~65 steps here), the breaker and budget windows 1 h / 1 day -> 120 s / 600 s
    (a fault every ~40 s here stands for one every few hours on a real job)."""
    data = yaml.safe_load((ROOT / "rules" / "recovery.yaml").read_text())
    d = data["defaults"]
    d["stall"]["floor_s"] = 10.0
    d["stall"]["startup_s"] = 60.0
    d["breaker"]["window_s"] = 120
    d["budget"]["window_s"] = 600
    for p in [d, *data["policies"]]:
        b = p.get("backoff")
        if b:
            b["initial_s"] = round(b["initial_s"] / 10, 1)
            b["max_s"] = round(b["max_s"] / 30, 1)
        if p.get("budget"):
            p["budget"]["window_s"] = 600
    return data


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slurm_env() -> dict[str, str]:
    """Starts (or reuses) the local cluster; its env lines exported here."""
    out = subprocess.run(["bash", str(ROOT / ".ci" / "slurm.sh")], capture_output=True, text=True, check=True).stdout
    env = dict(os.environ)
    for word in out.split():
        if "=" in word and word != "export":
            k, v = word.split("=", 1)
            env[k] = v
    return env


@dataclass
class Deployment:
    work: Path
    env: dict[str, str] = field(default_factory=dict)
    url: str = ""
    sched_token: str = ""
    admin_token: str = ""
    procs: list[subprocess.Popen] = field(default_factory=list)
    tmpfs: bool = False
    store_url: str = ""

    @property
    def ckpt(self) -> Path:
        return self.work / "ckpt"

    @property
    def chaos_dir(self) -> Path:
        return self.work / "chaos"

    def start(self, *, ckpt_mb: int = 24) -> None:
        # SIGTERM (a CI timeout, kill) unwinds like Ctrl-C, so stop() runs and nothing is left behind
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        self.work.mkdir(parents=True, exist_ok=True)
        self.chaos_dir.mkdir(exist_ok=True)
        self.ckpt.mkdir(exist_ok=True)
        self.env = slurm_env()
        for n in NODES:
            self.scontrol("update", f"NodeName={n}", "State=RESUME")
        # the checkpoint directory on its own small filesystem, so it can really fill up
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={ckpt_mb}m", "chaos-ckpt", str(self.ckpt)],
                           capture_output=True, text=True)
        self.tmpfs = r.returncode == 0
        rules = self.work / "recovery.yaml"
        rules.write_text(yaml.safe_dump(campaign_rules(), sort_keys=False))
        (self.chaos_dir / "probe-faults").write_text("")
        data = self.work / "logdx-data"
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.env.update({
            "LOGDX_DATA_DIR": str(data), "LOGDX_CONTROLLER_SCHEDULER": "slurm",
            "LOGDX_SLURM_CONF": self.env["SLURM_CONF"], "LOGDX_CONTROLLER_LIVE_WATCH": "true",
            "LOGDX_CONTROLLER_LIVE_INTERVAL_S": "1", "LOGDX_RECOVERY_RULES": str(rules),
            "LOGDX_CONTROLLER_PROBE_TIMEOUT_S": "20", "LOGDX_SLURM_PROBE_IMMEDIATE_S": "5",
            "LOGDX_PROBE_FAULTS_FILE": str(self.chaos_dir / "probe-faults"),
            "LOGDX_LLM_BACKEND": "none", "PYTHONPATH": str(ROOT),
        })
        logdx = [sys.executable, "-m", "app.cli"]
        tok = lambda role: subprocess.run([*logdx, "token", "create", "--role", role, "--name", f"chaos-{role}"],  # noqa: E731
                                          env=self.env, cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()[-1]
        self.sched_token, self.admin_token = tok("scheduler"), tok("admin")
        srv_log = (self.work / "server.log").open("ab")
        self.procs.append(subprocess.Popen([*logdx, "serve", "--port", str(port), "--log-level", "warning"],
                                           env=self.env, cwd=ROOT, stdout=srv_log, stderr=subprocess.STDOUT,
                                           start_new_session=True))
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/readyz", timeout=2).read()
                break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline or self.procs[-1].poll() is not None:
                    raise RuntimeError(f"logdx serve did not start: {(self.work / 'server.log').read_text()[-2000:]}")
                time.sleep(0.5)
        self.api("PUT", f"/v1/clusters/{CLUSTER}/controller", {"actions_enabled": True, "node_count": len(NODES)},
                 admin=True)
        sport = free_port()
        self.store_url = f"http://127.0.0.1:{sport}"
        self.procs.append(subprocess.Popen([sys.executable, str(SRC / "objstore.py"), "--port", str(sport),
                                            "--dir", str(self.work / "bucket"),
                                            "--control", str(self.chaos_dir / "store-drop-until")],
                                           stdout=(self.work / "objstore.log").open("ab"),
                                           stderr=subprocess.STDOUT, start_new_session=True))
        self.install_epilog()

    def install_epilog(self) -> None:
        """What a site's EpilogSlurmctld does: run examples/slurm_epilog.sh for every job."""
        HOOK.parent.mkdir(parents=True, exist_ok=True)
        HOOK.write_text(f"""#!/bin/bash
# installed by bench/chaos (removed when the run ends)
[[ "$SLURM_JOB_NAME" == chaos* ]] || exit 0
export LOGDX_URL={self.url} LOGDX_TOKEN={self.sched_token} LOGDX_RECOVER=1 LOGDX_WAIT_S=60
echo "$(date +%s.%N) epilog job $SLURM_JOB_ID start" >> {self.work}/epilog.log
{ROOT}/examples/slurm_epilog.sh >> {self.work}/epilog.log 2>&1
echo "$(date +%s.%N) epilog job $SLURM_JOB_ID end" >> {self.work}/epilog.log
""")
        HOOK.chmod(0o755)

    def stop(self) -> None:
        HOOK.unlink(missing_ok=True)
        subprocess.run(["scancel", "-n", "chaos-train"], env=self.env, capture_output=True)
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        for n in NODES:
            self.scontrol("update", f"NodeName={n}", "State=RESUME")
        if self.tmpfs:
            subprocess.run(["umount", "-l", str(self.ckpt)], capture_output=True)

    # -- helpers ------------------------------------------------------------------------------
    def api(self, method: str, path: str, body: dict | None = None, *, admin: bool = False) -> dict:
        token = self.admin_token if admin else self.sched_token
        req = urllib.request.Request(self.url + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read() or b"{}")

    def scontrol(self, *args: str) -> str:
        return subprocess.run(["scontrol", *args], env=self.env, capture_output=True, text=True).stdout

    def submit(self, *, iters: int, nodes: int = 2, train_args: str = "") -> str:
        env = dict(self.env, CHAOS_WORK=str(self.work), CHAOS_DIR=str(self.chaos_dir), CHAOS_SRC=str(SRC),
                   CHAOS_PYTHON=sys.executable, CHAOS_CKPT=str(self.ckpt), CHAOS_STORE_URL=self.store_url,
                   CHAOS_TRAIN_ARGS=f"--iters {iters} {train_args}", LOGDX_URL=self.url, LOGDX_TOKEN=self.sched_token)
        out = subprocess.run(["sbatch", "--parsable", "-N", str(nodes), "--requeue", "-J", "chaos-train",
                              "-D", str(self.work), "-o", str(self.work / "job-%j.log"),
                              "--comment", f"logdx_ckpt={self.ckpt}", str(SRC / "job.sh")],
                             env=env, capture_output=True, text=True, check=True)
        return out.stdout.strip().split(";")[0]

    def job(self, ext: str) -> dict[str, str]:
        from app.controller.schedulers.slurm import parse_record

        line = self.scontrol("show", "job", "-o", ext).strip().splitlines()
        return parse_record(line[0]) if line else {}

    def drained(self) -> list[str]:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], env=self.env, capture_output=True, text=True).stdout
        return sorted({n for n, st in (l.split()[:2] for l in out.splitlines() if l.strip())
                       if "drain" in st or "down" in st})


def main() -> int:  # a manual smoke run: python bench/chaos/deploy.py WORKDIR
    dep = Deployment(Path(sys.argv[1]))
    dep.start()
    print(json.dumps({"url": dep.url, "admin": dep.admin_token, "tmpfs": dep.tmpfs}))
    try:
        ext = dep.submit(iters=int(sys.argv[2]) if len(sys.argv) > 2 else 200)
        print("job", ext)
        while dep.job(ext).get("JobState") not in ("COMPLETED", "FAILED", "CANCELLED"):
            time.sleep(2)
        print(dep.job(ext).get("JobState"))
    finally:
        dep.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
