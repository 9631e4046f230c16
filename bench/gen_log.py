#!/usr/bin/env python3
"""Generate a realistic, deterministic multi-rank LLM pretraining log that ends in a failure.

The log mimics a 64-GPU (8 hosts x 8 GPUs) Megatron-DeepSpeed/InternEvo-style pretraining job as
collected by `srun -l`/pdsh (every line prefixed with `node-NN: `):

- start-up: torchrun banners per host, NCCL INFO init chatter from every rank, the Megatron
  argument dump, the DeepSpeed config dump, apex/amp table, one-off warnings;
- training: per step a metrics line from every rank (InternEvo style), the Megatron iteration
  line (last rank), DeepSpeed step/timer lines and a tqdm bar (rank 0), HF-style loss dicts,
  timers, memory reports, repeated framework warnings and periodic checkpoint saves;
- failure burst: one rank hits an uncorrectable ECC error (`[rankR]:` traceback), its local
  peers see NCCL connections close, every other rank times out in the NCCL watchdog ten minutes
  later, and every host's torchrun prints a ChildFailedError summary.

A sidecar `<out>.truth.json` records the injected root cause (type, rank, host, 1-based line).
Writes are streamed in ~4 MiB chunks, so memory stays flat whatever the size.

    python bench/gen_log.py --size-mb 500 --out bench/out/pretrain-500mb.log [--gz|--zst]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

CHUNK_BYTES = 4 << 20
START = datetime(2024, 3, 1, 8, 0, 0, tzinfo=timezone.utc)
STEP_SECONDS = 1.31
WATCHDOG_MS = 600_000


class Writer:
    """Accumulates lines, writes joined chunks, counts lines and bytes."""

    def __init__(self, path: Path, compression: str | None) -> None:
        self.path = path
        self._raw = open(path, "wb")
        self._zst = None
        if compression == "gz":
            self._out = gzip.GzipFile(fileobj=self._raw, mode="wb", compresslevel=1, mtime=0)
        elif compression == "zst":
            import zstandard

            self._zst = zstandard.ZstdCompressor(level=3).stream_writer(self._raw, closefd=False)
            self._out = self._zst
        else:
            self._out = self._raw
        self.buf: list[str] = []
        self.buf_bytes = 0  # approximate (characters), refreshed on flush
        self.lines = 0
        self.bytes = 0

    def next_line_no(self) -> int:
        return self.lines + len(self.buf) + 1

    def extend(self, lines: list[str]) -> None:
        self.buf.extend(lines)

    def maybe_flush(self) -> None:
        if len(self.buf) >= 8192:
            self.flush()

    def flush(self) -> None:
        if not self.buf:
            return
        data = "".join(self.buf).encode("utf-8")
        self._out.write(data)
        self.lines += len(self.buf)
        self.bytes += len(data)
        self.buf.clear()

    def close(self) -> None:
        self.flush()
        if self._out is not self._raw:
            self._out.close()
        self._raw.close()


def host_of(rank: int, gpus: int) -> str:
    return f"node-{rank // gpus:02d}"


def ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S")


def header(w: Writer, rng: random.Random, ranks: int, gpus: int) -> dict[int, int]:
    hosts = ranks // gpus
    pids = {r: 10_000 + rng.randrange(80_000) for r in range(ranks)}
    out = w.buf
    for h in range(hosts):
        p = f"node-{h:02d}: "
        tpid = 1000 + h
        out += [
            f"{p}W0301 08:00:0{h % 10}.123000 {tpid} torch/distributed/run.py:779] \n",
            f"{p}W0301 08:00:0{h % 10}.123000 {tpid} torch/distributed/run.py:779] *****************************************\n",
            f"{p}W0301 08:00:0{h % 10}.123000 {tpid} torch/distributed/run.py:779] Setting OMP_NUM_THREADS environment "
            "variable for each process to be 1 in default, to avoid your system being overloaded, please further tune "
            "the variable for optimal performance in your application as needed. \n",
            f"{p}W0301 08:00:0{h % 10}.123000 {tpid} torch/distributed/run.py:779] *****************************************\n",
        ]
    for r in range(ranks):
        p = f"node-{r // gpus:02d}: "
        out.append(f"{p}[2024-03-01 08:00:12,{r:03d}] [INFO] [real_accelerator.py:191:get_accelerator] "
                   "Setting ds_accelerator to cuda (auto detect)\n")
        out.append(f"{p}[2024-03-01 08:00:14,{r:03d}] [INFO] [comm.py:637:init_distributed] cdb=None\n")
    # Megatron argument dump and DeepSpeed config dump on rank 0
    p0 = "node-00: "
    out.append(f"{p0}------------------------ arguments ------------------------\n")
    for i in range(160):
        name = f"arg_{i:03d}_" + rng.choice(["size", "ratio", "enabled", "path", "interval", "dropout"])
        val = rng.choice(["True", "False", "None", str(rng.randrange(1, 8192)), f"{rng.random():.4f}", "/data/corpus"])
        out.append(f"{p0}  {name} {'.' * max(3, 48 - len(name))} {val}\n")
    out.append(f"{p0}-------------------- end of arguments ---------------------\n")
    for i in range(60):
        key = f"ds_option_{i:02d}"
        out.append(f"{p0}[2024-03-01 08:00:20,{i:03d}] [INFO] [config.py:988:print]   {key} {'.' * 20} {rng.choice(['True', 'False', '1', 'None'])}\n")
    for line in ("Selected optimization level O2:  FP16 training with FP32 batchnorm and FP32 master weights.",
                 "Defaults for this optimization level are:", "enabled                : True",
                 "opt_level              : O2", "cast_model_type        : torch.float16",
                 "keep_batchnorm_fp32    : True", "master_weights         : True", "loss_scale             : dynamic"):
        out.append(p0 + line + "\n")
    # NCCL init chatter: every rank
    for r in range(ranks):
        h, local = r // gpus, r % gpus
        pre = f"node-{h:02d}: node-{h:02d}:{pids[r]}:{pids[r] + 90} [{local}] NCCL INFO "
        comm = f"0x{rng.getrandbits(40):x}"
        lines = []
        if r == 0:
            lines.append("NCCL version 2.18.5+cuda12.2")
        lines += [
            "cudaDriverVersion 12020",
            f"Bootstrap : Using ib0:10.10.{h}.{local + 10}<0>",
            "NET/Plugin : No plugin found, using internal implementation",
            f"NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB ; OOB ib0:10.10.{h}.{local + 10}<0>",
            "Using network IB",
            f"comm {comm} rank {r} nranks {ranks} cudaDev {local} nvmlDev {local} busId {local * 0x1000 + 0x18000:x} "
            f"commId 0x{rng.getrandbits(64):016x} - Init START",
            f"Setting affinity for GPU {local} to ffffffff,00000000,ffffffff",
            f"comm {comm} rank {r} nRanks {ranks} nNodes {hosts} localRanks {gpus} localRank {local} MNNVL 0",
            f"Trees [0] {(r + 1) % ranks}/-1/-1->{r}->{(r - 1) % ranks} [1] {(r + 1) % ranks}/-1/-1->{r}->{(r - 1) % ranks}",
            "P2P Chunksize set to 524288",
        ]
        for c in range(8):
            lines.append(f"Channel {c:02d}/0 : {r}[{local}] -> {(r + 1) % ranks}[{(local + 1) % gpus}] via P2P/IPC/read")
        lines += [
            "Connected all rings",
            "Connected all trees",
            "threadThresholds 8/8/64 | 512/8/64 | 512 | 512",
            "16 coll channels, 0 nvls channels, 16 p2p channels, 16 p2p channels per peer",
            f"comm {comm} rank {r} nranks {ranks} cudaDev {local} nvmlDev {local} busId {local * 0x1000 + 0x18000:x} "
            f"commId 0x{rng.getrandbits(64):016x} - Init COMPLETE",
        ]
        out += [pre + x + "\n" for x in lines]
    for r in range(ranks):
        p = f"node-{r // gpus:02d}: "
        out.append(f"{p}[rank{r}]:/usr/local/lib/python3.10/dist-packages/torch/_utils.py:831: UserWarning: TypedStorage "
                   "is deprecated. It will be removed in the future and UntypedStorage will be the only storage class. "
                   "This should only matter to you if you are using storages directly.  To access UntypedStorage "
                   "directly, use tensor.untyped_storage() instead of tensor.storage()\n")
        out.append(f"{p}[rank{r}]:  return self.fget.__get__(instance, owner)()\n")
    w.flush()
    return pids


def training(w: Writer, rng: random.Random, ranks: int, gpus: int, target_bytes: int) -> tuple[int, datetime]:
    """Emit training steps until `target_bytes` (minus room for the failure burst) is written."""
    rand = rng.random
    prefixes = [f"node-{r // gpus:02d}: " for r in range(ranks)]
    last = ranks - 1
    p_last, p0 = prefixes[last], prefixes[0]
    train_iters = 500_000
    step = 0
    loss = 10.8
    t = START + timedelta(seconds=120)
    # pre-built fixed parts
    # two-stage formatting: step-level fields once per step, rank-level fields per line
    evo_step_fmt = ("%%s%s,%%03d\tINFO pipeline.py:571 in record_current_batch_training_metrics -- tflops=%%.2f "
                    "step=%d loss=%%.4f real_tgs=%%.2f tgs (tokens/gpu/second)=%%.2f tgs/last_tgs_1=%%.2f "
                    "tgs/tgs_all=3990.00 tgs/tgs_avg=3990.00 lr=%.6e loss_scale=65536.0 grad_norm={'0_default': %.4f} "
                    "micro_num=4 num_consumed_tokens=%d inf_nan_skip_batches=0 num_samples_in_batch=%%d "
                    "largest_length=4096 fwd_bwd_time=%%.2f acc=%%.4f perplexity=%.4f\n")
    meg_fmt = ("%s [%s] iteration %8d/%8d | consumed samples: %12d | elapsed time per iteration (ms): %.1f | "
               "throughput per GPU (TFLOP/s/GPU): %.1f | learning rate: %.6E | global batch size:  1024 | "
               "lm loss: %.6E | loss scale: 1.0 | grad norm: %.3f | num zeros: 0.0 | number of skipped iterations:   0 | "
               "number of nan iterations:   0 |\n")
    ds_fmt = ("%s[%s,%03d] [INFO] [logging.py:96:log_dist] [Rank 0] step=%d, skipped=0, lr=[%r, %r], "
              "mom=[(0.9, 0.95), (0.9, 0.95)]\n")
    timer_fmt = ("%s[%s,%03d] [INFO] [timer.py:260:stop] epoch=0/micro_step=%d/global_step=%d, "
                 "RunningAvgSamplesPerSec=%.2f, CurrSamplesPerSec=%.2f, MemAllocated=31.2GB, MaxMemAllocated=61.9GB\n")
    bar_fmt = "%s[rank0]:Epoch 0:  %2d%%|%-20s| %d/%d [%s<%s, %.2fit/s, loss=%.3g, v_num=7xq2]\n"
    warn = ("[rank%d]:/usr/local/lib/python3.10/dist-packages/torch/utils/checkpoint.py:460: UserWarning: "
            "torch.utils.checkpoint: please pass in use_reentrant=True or use_reentrant=False explicitly. The default "
            "value of use_reentrant will be updated to be False in the future. To maintain current behavior, pass "
            "use_reentrant=True. It is recommended that you use use_reentrant=False. Refer to docs for more details "
            "on the differences between the two variants.\n")
    warn_lines = [prefixes[r] + (warn % r) for r in range(ranks)]
    echo_lines = [f"{prefixes[r]}[rank{r}]:  warnings.warn(\n" for r in range(ranks)]
    budget = target_bytes
    rank_ids = range(ranks)
    approx = 0
    buf = w.buf
    while approx < budget:
        step += 1
        t += timedelta(seconds=STEP_SECONDS + (rand() - 0.5) * 0.05)
        stamp = ts(t)
        loss = max(1.6, loss * 0.99985 - 0.0004 + (rand() - 0.5) * 0.01)
        lr = 3e-4 * min(1.0, step / 2000)
        gn = 0.8 + rand() * 0.4
        ms = rng.randrange(1000)
        evo = evo_step_fmt % (stamp, step, lr, gn, step * 4_194_304, 2.718281828 ** min(loss, 20.0))
        lines = [evo % (prefixes[r], (ms + r) % 1000, 175.0 + rand() * 10.0, loss + (rand() - 0.5) * 0.02,
                        tgs - 40.0, tgs, tgs, 15 + (r & 7), 6.3 + rand() * 0.4, 0.5 + rand() * 0.02)
                 for r, tgs in zip(rank_ids, [3900.0 + rand() * 250.0 for _ in rank_ids])]
        lines.append(meg_fmt % (p_last, stamp, step, train_iters, step * 1024, 1310.0 + rand() * 40.0,
                                178.0 + rand() * 6.0, lr, loss, gn))
        lines.append(ds_fmt % (p0, stamp, ms, step, lr, lr))
        lines.append(timer_fmt % (p0, stamp, ms, step * 4, step, 780.0 + rand() * 5.0, 770.0 + rand() * 30.0))
        pct = step * 100 // train_iters
        el = int((t - START).total_seconds())
        left = int((train_iters - step) * STEP_SECONDS)
        lines.append(bar_fmt % (p0, pct, "#" * (pct // 5), step, train_iters, f"{el // 3600}:{el // 60 % 60:02d}:{el % 60:02d}",
                                f"{left // 3600}:{left // 60 % 60:02d}:{left % 60:02d}", 0.76 + rand() * 0.01, loss))
        if step % 10 == 0:
            lines.append("%s{'loss': %.4f, 'grad_norm': %.4f, 'learning_rate': %r, 'epoch': %.2f}\n"
                         % (p0, loss, gn, lr, step / 20000))
            lines.append("%stime (ms) | forward-backward: %.2f | forward-compute: %.2f | backward-compute: %.2f | "
                         "batch-generator: %.2f | all-grads-sync: %.2f | optimizer: %.2f\n"
                         % (p_last, 1200 + rand() * 30, 400 + rand() * 10, 790 + rand() * 20, 1 + rand(),
                            10 + rand(), 40 + rand() * 3))
        if step % 50 == 0:
            lines += warn_lines
            lines += echo_lines
        if step % 100 == 0:
            for h in range(0, ranks, gpus):
                lines.append("%s[Rank %d] (after %d iterations) memory (MB) | allocated: %.2f | max allocated: %.2f | "
                             "reserved: 64012.0 | max reserved: 64012.0\n"
                             % (prefixes[h], h, step, 31000 + rand() * 100, 61000 + rand() * 500))
        if step % 1000 == 0:
            lines.append(f"{p_last}saving checkpoint at iteration {step:7d} to /ckpt/gpt-70b in torch_dist format\n")
            for r in range(ranks):
                lines.append(f"{prefixes[r]}[{stamp},{ms:03d}] [INFO] [engine.py:3480:_save_checkpoint] Saving model "
                             f"checkpoint: /ckpt/gpt-70b/global_step{step}/mp_rank_{r:02d}_model_states.pt\n")
            lines.append(f"{p_last}  successfully saved checkpoint from iteration {step:7d} to /ckpt/gpt-70b "
                         "[ t 1/8, p 1/1 ]\n")
        buf += lines
        if len(buf) >= 2048:
            w.flush()
            approx = w.bytes
    return step, t


def failure(w: Writer, rng: random.Random, ranks: int, gpus: int, pids: dict[int, int], step: int,
            t: datetime, bad_rank: int) -> dict:
    hosts = ranks // gpus
    bad_host = host_of(bad_rank, gpus)
    bad_local = bad_rank % gpus
    p = f"{bad_host}: "
    out = w.buf
    t_err = t + timedelta(seconds=0.8)
    tb = [
        "Traceback (most recent call last):",
        '  File "/workspace/Megatron-LM/pretrain_gpt.py", line 278, in <module>',
        "    pretrain(",
        '  File "/workspace/Megatron-LM/megatron/training/training.py", line 355, in pretrain',
        "    iteration, num_floating_point_operations_so_far = train(",
        '  File "/workspace/Megatron-LM/megatron/training/training.py", line 1244, in train',
        "    train_step(forward_step_func,",
        '  File "/workspace/Megatron-LM/megatron/training/training.py", line 699, in train_step',
        "    losses_reduced = forward_backward_func(",
        '  File "/workspace/Megatron-LM/megatron/core/pipeline_parallel/schedules.py", line 1420, in forward_backward_pipelining_without_interleaving',
        "    backward_step(input_tensor, output_tensor, output_tensor_grad, model_type, config)",
        '  File "/usr/local/lib/python3.10/dist-packages/torch/autograd/__init__.py", line 267, in backward',
        "    _engine_run_backward(",
    ]
    for line in tb:
        out.append(f"{p}[rank{bad_rank}]: {line}\n")
    err_text = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
    err_line = w.next_line_no()
    out.append(f"{p}[rank{bad_rank}]: {err_text}\n")
    for line in ("CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
                 "below might be incorrect.", "For debugging consider passing CUDA_LAUNCH_BLOCKING=1.",
                 "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.", ""):
        out.append(f"{p}[rank{bad_rank}]: {line}\n")
    peers = [r for r in range(bad_rank - bad_local, bad_rank - bad_local + gpus) if r != bad_rank]
    for r in peers:
        pid = pids[r]
        out.append(f"{p}{bad_host}:{pid}:{pid + 95} [{r % gpus}] NCCL INFO [Service thread] Connection closed by "
                   f"localRank {bad_local}\n")
    # ten minutes of silence, then every other rank's watchdog fires
    seq = step * 37 + 12
    t_to = t_err + timedelta(milliseconds=WATCHDOG_MS + 50)
    others = [r for r in range(ranks) if r != bad_rank]
    rng.shuffle(others)
    stamp = t_to.strftime("%m%d %H:%M:%S")
    for i, r in enumerate(others):
        pr = f"{host_of(r, gpus)}: [rank{r}]:[E{stamp}.{i:06d}000 ProcessGroupNCCL.cpp:"
        out += [
            f"{pr}632] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
            f"OpType=ALLREDUCE, NumelIn=134217728, NumelOut=134217728, Timeout(ms)={WATCHDOG_MS}) ran for "
            f"{WATCHDOG_MS + 36 + i} milliseconds before timing out.\n",
            f"{pr}1664] [PG 0 Rank {r}] Exception (either an error or timeout) detected by watchdog at work: {seq}, "
            f"last enqueued NCCL work: {seq}, last completed NCCL work: {seq - 1}.\n",
            f"{pr}1709] [PG 0 Rank {r}] Timeout at NCCL work: {seq}, last enqueued NCCL work: {seq}, last completed "
            f"NCCL work: {seq - 1}.\n",
            f"{pr}577] [Rank {r}] Some NCCL operations have failed or timed out. Due to the asynchronous nature of "
            "CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.\n",
            f"{pr}583] [Rank {r}] To avoid data inconsistency, we are taking the entire process down.\n",
            f"{host_of(r, gpus)}: [rank{r}]:terminate called after throwing an instance of 'c10::DistBackendError'\n",
        ]
    # torchrun on every host: SIGTERM to the survivors, ChildFailedError summary
    t_end = t_to + timedelta(seconds=3)
    for h in range(hosts):
        host = f"node-{h:02d}"
        ph = f"{host}: "
        local_ranks = list(range(h * gpus, (h + 1) * gpus))
        first = bad_rank if host == bad_host else local_ranks[0]
        code = 1 if host == bad_host else -6
        for r in local_ranks:
            if r != first:
                out.append(f"{ph}W0301 {t_end:%H:%M:%S}.000000 {1000 + h} torch/distributed/elastic/multiprocessing/"
                           f"api.py:897] Sending process {pids[r]} closing signal SIGTERM\n")
        out.append(f"{ph}E0301 {t_end:%H:%M:%S}.500000 {1000 + h} torch/distributed/elastic/multiprocessing/api.py:869] "
                   f"failed (exitcode: {code}) local_rank: {first % gpus} (pid: {pids[first]}) of binary: /usr/bin/python3\n")
        summary = [
            "Traceback (most recent call last):",
            '  File "/usr/local/bin/torchrun", line 8, in <module>',
            "    sys.exit(main())",
            '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/run.py", line 919, in main',
            "    run(args)",
            '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/launcher/api.py", line 263, in launch_agent',
            "    raise ChildFailedError(",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
            "============================================================",
            "pretrain_gpt.py FAILED",
            "------------------------------------------------------------",
            "Failures:",
            "  <NO_OTHER_FAILURES>",
            "------------------------------------------------------------",
            "Root Cause (first observed failure):",
            "[0]:",
            f"  time      : {t_end:%Y-%m-%d_%H:%M:%S}",
            f"  host      : {host}",
            f"  rank      : {first} (local_rank: {first % gpus})",
            f"  exitcode  : {code} (pid: {pids[first]})",
            "  error_file: <N/A>",
            "  traceback : " + ("To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
                                if code == 1 else f"Signal 6 (SIGABRT) received by PID {pids[first]}"),
            "============================================================",
        ]
        out += [ph + x + "\n" for x in summary]
    out.append(f"srun: error: {bad_host}: task {bad_rank // gpus}: Exited with exit code 1\n")
    for h in range(hosts):
        if f"node-{h:02d}" != bad_host:
            out.append(f"srun: error: node-{h:02d}: task {h}: Exited with exit code 1\n")
    return {
        "root_cause": "ECCError",
        "category": "infrastructure",
        "action": "isolate_and_restart",
        "rank": bad_rank,
        "host": bad_host,
        "line": err_line,
        "text": f"{p}[rank{bad_rank}]: {err_text}",
        "time": t_err.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "co_occurring": ["NCCLTimeoutError"],
        "last_step": step,
    }


def generate(out: Path, size_mb: float, *, seed: int = 0, ranks: int = 64, gpus: int = 8,
             compression: str | None = None, bad_rank: int | None = None) -> dict:
    rng = random.Random(seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    if bad_rank is None:
        bad_rank = 5 * gpus + 5 if ranks > 5 * gpus + 5 else ranks - 1
    w = Writer(out, compression)
    started = time.perf_counter()
    pids = header(w, rng, ranks, gpus)
    target = int(size_mb * (1 << 20)) - 200_000  # leave room for the failure burst
    step, t = training(w, rng, ranks, gpus, max(target, w.bytes + 1))
    truth = failure(w, rng, ranks, gpus, pids, step, t, bad_rank)
    w.close()
    elapsed = time.perf_counter() - started
    truth.update({"schema": "logdx.bench-truth/v1", "generator": "bench/gen_log.py", "seed": seed,
                  "ranks": ranks, "hosts": ranks // gpus, "lines": w.lines, "bytes_uncompressed": w.bytes,
                  "compression": compression or "none", "file": out.name,
                  "gen_seconds": round(elapsed, 2), "gen_mb_per_s": round(w.bytes / (1 << 20) / elapsed, 1)})
    Path(str(out) + ".truth.json").write_text(json.dumps(truth, indent=2) + "\n", encoding="utf-8")
    return truth


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=float, default=500.0, help="uncompressed size to generate (default 500)")
    ap.add_argument("--out", type=Path, default=None, help="output path (default bench/out/pretrain-<size>mb.log)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--gpus-per-host", type=int, default=8)
    ap.add_argument("--bad-rank", type=int, default=None, help="rank that hits the ECC error (default 45)")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--gz", action="store_true", help="gzip the output (level 1)")
    group.add_argument("--zst", action="store_true", help="zstd the output (level 3)")
    args = ap.parse_args(argv)
    if args.ranks % args.gpus_per_host:
        ap.error("--ranks must be a multiple of --gpus-per-host")
    comp = "gz" if args.gz else "zst" if args.zst else None
    out = args.out or Path(__file__).parent / "out" / (f"pretrain-{args.size_mb:g}mb.log" + (f".{comp}" if comp else ""))
    truth = generate(out, args.size_mb, seed=args.seed, ranks=args.ranks, gpus=args.gpus_per_host,
                     compression=comp, bad_rank=args.bad_rank)
    print(f"wrote {out} ({truth['bytes_uncompressed'] / (1 << 20):.1f} MiB uncompressed, {truth['lines']} lines) "
          f"in {truth['gen_seconds']} s = {truth['gen_mb_per_s']} MiB/s; root cause {truth['root_cause']} "
          f"rank {truth['rank']} on {truth['host']} at line {truth['line']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
