"""A batch job for the local Slurm cluster that behaves like a training job: it writes Megatron
progress lines and checkpoints, fails the way it is told on its first run(s), and on a restart
reads the controller's restart file and resumes from the checkpoint named there."""

from __future__ import annotations

import sys
from pathlib import Path

SCRIPT = r'''#!{python}
import json, os, sys, time
from pathlib import Path

work = Path.cwd()  # sbatch -D
mode = sys.argv[1]
fail_runs = int(sys.argv[2])
nodes = os.popen("scontrol show hostnames " + os.environ["SLURM_JOB_NODELIST"]).read().split()
restart = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
host = nodes[0]
spec_file = work / "logdx-restart.json"
spec = json.loads(spec_file.read_text()) if spec_file.exists() else {{}}
start = 1
if restart:
    start = (spec.get("checkpoint_step") or 0) + 1
    print(f"resuming from checkpoint {{spec.get('checkpoint')}} step {{spec.get('checkpoint_step')}} "
          f"skip {{spec.get('skip_batches')}} on {{','.join(nodes)}}", flush=True)
ckpt = work / "ckpt"
# a job that fails the same way again (not a hardware fault) makes no progress past step 30
end = start + 29 if (restart == 0 or mode == "xid") else 30
for i in range(start, end + 1):
    print(f"{{host}}: samples/sec: 34.470 | iteration {{i:8d}}/  100000 | elapsed time per iteration (ms): "
          f"1000.2 | learning rate: 6.467E-05 | approx flops per GPU: 192.4TFLOPS | lm_loss: 2.100000E+00 | "
          f"loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |", flush=True)
    if i % 10 == 0 and restart == 0:
        d = ckpt / f"iter_{{i:07d}}"
        for tp in range(2):
            if i == 30 and tp == 1:
                continue  # the save in progress when the job died: one shard missing
            (d / f"mp_rank_{{tp:02d}}").mkdir(parents=True, exist_ok=True)
            (d / f"mp_rank_{{tp:02d}}" / "model_optim_rng.pt").write_bytes(b"w")
        if i < 30:
            (ckpt / "latest_checkpointed_iteration.txt").write_text(str(i))
if restart >= fail_runs:
    print("training finished", flush=True)
    sys.exit(0)
bad = nodes[-1]
if mode == "xid":
    print(f"{{bad}} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus.")
    print("RuntimeError: CUDA error: unspecified launch failure")
elif mode == "script":
    print("Traceback (most recent call last):")
    print('  File "/work/train.py", line 12, in <module>')
    print("KeyError: 'lr'")
elif mode == "s3":
    print('botocore.exceptions.EndpointConnectionError: Could not connect to the endpoint URL: "https://s3.example.com/b/shard.bin"')
sys.stdout.flush()
sys.exit(1)
'''


def write_job(work: Path) -> Path:
    path = work / "train.py"
    path.write_text(SCRIPT.format(python=sys.executable))
    path.chmod(0o755)
    return path
