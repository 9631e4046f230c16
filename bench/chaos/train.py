"""A tiny real training job for the fault-injection benchmark: a GPT-like model on CPU, data
parallel over `torch.distributed` (gloo), one rank per Slurm task (`srun`), Megatron-style
progress lines, Megatron-layout checkpoints (`iter_NNNNNNN/mp_rank_00/model_optim_rng.pt` and
`latest_checkpointed_iteration.txt`, written after every rank saved), each checkpoint also
uploaded to an object store (HTTP PUT, as a checkpoint-to-S3 step does).

Restart: the controller's restart spec (`logdx-restart.json` in the work directory, read as
`examples/restart_launcher.sh` does) names the checkpoint and the iterations to skip; without
one the job resumes from the tracker file, as Megatron's `--load` does.

Faults that need the job's own hand (everything else is done to it from outside by
bench/chaos/faults.py) are read from `$CHAOS_DIR/faults.json` at every step:
  {"nan_batch": S}        the data batch of iteration S makes the loss NaN (a poisoned sample);
  {"key_error": S}        iteration S raises KeyError (a bug in a code path reached at S);
  {"grow": "nodeK"}       the rank on nodeK needs 512 MiB more host memory at its next step (a
                          leaking data loader, a bigger batch): with its RLIMIT_AS lowered
                          (faults.py host_oom) the allocation fails;
  {"bad_node": "nodeK"}   the rank on nodeK fails as a GPU with uncorrectable ECC errors does
                          (the bad-GPU stand-in; the probe workers on nodeK fail too, via
                          LOGDX_PROBE_FAULTS_FILE).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import sys
import time
import urllib.request
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

VOCAB, DIM, LAYERS, HEADS, SEQ, BATCH = 128, 64, 2, 4, 32, 8


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.attn = nn.MultiheadAttention(DIM, HEADS, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, DIM), nn.Embedding(SEQ, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.head = nn.Linear(DIM, VOCAB)
        self.register_buffer("mask", torch.triu(torch.ones(SEQ, SEQ, dtype=torch.bool), 1), persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x, self.mask)
        return self.head(x)


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The data of one iteration: a pure function of (step, rank), so a restart sees the same
    batches and skipping a window skips exactly those."""
    g = torch.Generator().manual_seed(step * 1000 + rank)
    start = torch.randint(0, VOCAB, (BATCH, 1), generator=g)
    seq = (start + torch.arange(SEQ + 1) * 3) % VOCAB  # a learnable pattern
    noise = torch.randint(0, VOCAB, seq.shape, generator=g)
    seq = torch.where(torch.rand(seq.shape, generator=g) < 0.1, noise, seq)
    return seq[:, :-1], seq[:, 1:]


def faults(chaos_dir: Path | None) -> dict:
    if chaos_dir is None:
        return {}
    try:
        return json.loads((chaos_dir / "faults.json").read_text())
    except (OSError, ValueError):
        return {}


def restart_spec(workdir: Path) -> dict | None:
    """The controller's restart spec, when it was written for this run (its restart_count is
    SLURM_RESTART_COUNT): a spec left by an earlier restart is stale (logdx restart-args does the
    same check)."""
    path = Path(os.environ.get("LOGDX_RESTART_FILE") or workdir / "logdx-restart.json")
    try:
        spec = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    now = os.environ.get("SLURM_RESTART_COUNT")
    if spec.get("restart_count") is not None and now is not None and int(now) != spec["restart_count"]:
        print(f"restart spec {path} is for restart {spec['restart_count']}, this is restart {now}: ignored",
              flush=True)
        return None
    return spec


def tracker(ckpt: Path) -> int | None:
    try:
        return int((ckpt / "latest_checkpointed_iteration.txt").read_text().strip())
    except (OSError, ValueError):
        return None


def save(ckpt: Path, step: int, model: nn.Module, opt: torch.optim.Optimizer, rank: int, keep: int,
         store_url: str | None) -> None:
    """Megatron's order: every rank saves its shard (data parallel: rank 0 holds the only one),
    a barrier, then rank 0 writes the tracker; then the upload to the object store."""
    d = ckpt / f"iter_{step:07d}" / "mp_rank_00"
    if rank == 0:
        print(f"saving checkpoint at iteration {step:8d} to {ckpt}", flush=True)
        d.mkdir(parents=True, exist_ok=True)
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "iteration": step},
                   d / "model_optim_rng.pt")
    dist.barrier()
    if rank == 0:
        (ckpt / "latest_checkpointed_iteration.txt").write_text(str(step))
        print(f"  successfully saved checkpoint at iteration {step:8d} to {ckpt}", flush=True)
        if store_url:
            data = (d / "model_optim_rng.pt").read_bytes()
            req = urllib.request.Request(f"{store_url}/ckpt/iter_{step:07d}/model_optim_rng.pt", data=data,
                                         method="PUT")
            with urllib.request.urlopen(req, timeout=10) as resp:
                resp.read()
        # keep the newest `keep` checkpoints (torchtitan's keep_latest_k)
        olds = sorted(p for p in ckpt.glob("iter_*") if p.is_dir())
        for old in olds[:-keep]:
            for f in sorted(old.rglob("*"), reverse=True):
                f.unlink() if f.is_file() else f.rmdir()
            old.rmdir()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=100000)
    ap.add_argument("--save-interval", type=int, default=20)
    ap.add_argument("--keep", type=int, default=4)
    ap.add_argument("--ckpt", type=Path, required=True)
    ap.add_argument("--store-url", default=os.environ.get("CHAOS_STORE_URL"))
    ap.add_argument("--dist-timeout-s", type=float, default=10.0)
    ap.add_argument("--step-ms", type=float, default=150.0, help="pad each step to at least this long")
    args = ap.parse_args()

    torch.set_num_threads(1)
    rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
    node = os.environ.get("SLURMD_NODENAME", socket.gethostname())
    chaos = Path(os.environ["CHAOS_DIR"]) if os.environ.get("CHAOS_DIR") else None
    job, restarts = int(os.environ.get("SLURM_JOB_ID", "0")), int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    port = 20000 + (job * 37 + restarts * 7) % 20000
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=args.dist_timeout_s))
    if rank == 0:
        print(f"> initialized torch.distributed (gloo) with {world} ranks; restart {restarts}", flush=True)
    print(f"[rank{rank}] running on {node} pid {os.getpid()}", flush=True)
    if chaos:
        (chaos / "pids").mkdir(exist_ok=True)
        (chaos / "pids" / f"{job}.{restarts}.{rank}").write_text(f"{os.getpid()} {node}\n")

    torch.manual_seed(0)
    model = TinyGPT()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    spec = restart_spec(Path.cwd())
    load, skip = None, None
    if spec and spec.get("checkpoint"):
        load = Path(spec["checkpoint"])
        skip = spec.get("skip_batches")
        if rank == 0:
            print(f"restart spec: load {load} skip {skip} ({spec.get('reason', '')[:80]})", flush=True)
    elif (t := tracker(args.ckpt)) is not None:
        load = args.ckpt / f"iter_{t:07d}"
    start = 1
    if load is not None:
        state = torch.load(load / "mp_rank_00" / "model_optim_rng.pt", weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["iteration"] + 1
        if rank == 0:
            print(f"  loading checkpoint from {load.parent} at iteration {state['iteration']}", flush=True)
    params = [p for p in model.parameters()]
    skipped = 0
    t_last = time.monotonic()
    for step in range(start, args.iters + 1):
        t0 = time.monotonic()
        f = faults(chaos)
        if skip and skip[0] <= step <= skip[1]:
            skipped += 1
            if rank == 0 and (step == skip[0] or step == skip[1]):
                print(f"skipping iteration {step} (restart spec skip_batches {skip})", flush=True)
            continue
        if f.get("bad_node") == node:
            raise RuntimeError("CUDA error: uncorrectable ECC error encountered\n"
                               "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")
        if f.get("key_error") == step:
            cfg = {"lr": 3e-3}
            cfg["lr_warmup_schedule"]  # noqa: B018 - the injected bug: a key the config lacks
        if f.get("grow") == node:
            hog = torch.ones(128 << 20)  # noqa: F841 - 512 MiB the rank now needs
        x, y = batch(step, rank)
        loss = F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))
        if f.get("nan_batch") == step:
            loss = loss * float("nan")
        opt.zero_grad(set_to_none=False)
        loss.backward()
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        local_norm = flat.norm().item()
        if math.isnan(local_norm) or math.isinf(local_norm):
            # Megatron's --check-for-nan-in-loss-and-grad
            raise RuntimeError(f"Rank {rank}: found NaN in local grad norm in backward pass before data-parallel "
                               f"communication collective. Device: 0, node: {node}")
        dist.all_reduce(flat)
        flat /= world
        i = 0
        for p in params:
            n = p.numel()
            p.grad.copy_(flat[i:i + n].view_as(p))
            i += n
        gnorm = torch.nn.utils.clip_grad_norm_(params, 1.0).item()
        opt.step()
        lv = torch.tensor([loss.item()])
        dist.all_reduce(lv)
        pad = args.step_ms / 1000 - (time.monotonic() - t0)
        if pad > 0:
            time.sleep(pad)
        now = time.monotonic()
        if rank == 0:
            print(f" iteration {step:8d}/{args.iters:8d} | consumed samples: {step * BATCH * world:10d} | "
                  f"elapsed time per iteration (ms): {(now - t_last) * 1000:.1f} | learning rate: 3.000E-03 | "
                  f"global batch size: {BATCH * world:5d} | lm loss: {lv.item() / world:.6E} | "
                  f"grad norm: {gnorm:.3f} | number of skipped iterations: {skipped:3d} | "
                  f"number of nan iterations:   0 |", flush=True)
            skipped = 0
        t_last = now
        if step % args.save_interval == 0:
            save(args.ckpt, step, model, opt, rank, args.keep, args.store_url)
    dist.barrier()
    if rank == 0:
        print(f"[after training is done] iteration {args.iters}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
