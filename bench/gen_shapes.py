#!/usr/bin/env python3
"""Logs of adversarial shapes for the compression benchmark (deterministic for a seed).

The pretraining generators (`gen_log.py`, the independent `genlog.py`) are mostly metric lines
that compression drops. These shapes stress the other paths:

- `survive5`: per-rank metric lines from 64 ranks, and 5 % of lines that survive filtering,
  drawn from ~3,000 distinct warnings (library paths, line numbers, messages, ranks, hosts);
- `unfiltered`: no line matches a filter rule: per-rank application log lines (~240 templates
  with timestamps, counters, durations) from 256 ranks on 32 hosts;
- `short`: very short lines (nanoGPT's `iter N: loss X, time Yms`, ~40 bytes) from 8 ranks,
  with one progress line per rank per step;
- `unknown`: a trainer no filter rule knows: `it=N | lm_loss=X | gnorm Y | lr=Z | tok/s=W` from
  64 ranks, and rank 0's markdown table row (`| it | train loss | grad norm |` header) per step;
  every line survives filtering and its shape carries a training signal (app/core/signals.py),
  so it measures the kept-shape path with metric sampling and progress in the C loop.

Each ends with the same failure: a CUDA error traceback on rank 37 of host 10.0.0.15.

    python bench/gen_shapes.py survive5 --size-mb 500 --out /tmp/survive5.log
"""

from __future__ import annotations

import argparse
import random
import sys

SHAPES = ("survive5", "unfiltered", "short", "unknown")
WORDS = ("tensor shard bucket layer stage parameter gradient buffer stream kernel cache tokenizer "
         "sampler optimizer scheduler checkpoint module attention embedding projection batch "
         "sequence dtype device offload pipeline micro window rotary norm dropout").split()
LIBS = ("torch/nn/modules", "torch/distributed/fsdp", "transformers/models/llama", "deepspeed/runtime/zero",
        "apex/transformer", "megatron/core/tensor_parallel", "accelerate/utils", "datasets/arrow",
        "flash_attn/ops", "triton/runtime")
CATS = ("UserWarning", "FutureWarning", "DeprecationWarning", "RuntimeWarning", "ResourceWarning")
ACTIONS = ("opened", "closed", "flushed", "prefetched", "evicted", "resharded", "pinned", "mapped")


def _failure(seed_line: int) -> list[str]:
    p = "10.0.0.15: [rank37]:"
    return [
        f"{p} Traceback (most recent call last):",
        f"{p}   File \"/workspace/train.py\", line {seed_line}, in <module>",
        f"{p}     loss.backward()",
        f"{p} RuntimeError: CUDA error: an illegal memory access was encountered",
        f"{p} CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
    ]


def _host(rank: int, per_host: int = 8) -> str:
    return f"10.0.0.{rank // per_host + 1}"


def _warning_templates(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        lib = rng.choice(LIBS)
        mod = rng.choice(WORDS) + "_" + rng.choice(WORDS)
        msg = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 9)))
        out.append(f"/opt/conda/lib/python3.10/site-packages/{lib}/{mod}.py:{{line}}: {rng.choice(CATS)}: "
                   f"{msg} is deprecated for {rng.choice(WORDS)} {{n}}")
    return out


def survive5(rng: random.Random):
    warnings = _warning_templates(rng, 3000)
    step = 0
    while True:
        step += 1
        for r in range(64):
            if rng.random() < 0.05 * 64 / 63:  # ~5 % of all lines
                w = rng.choice(warnings).format(line=rng.randint(10, 2000), n=rng.randint(1, 64))
                yield f"{_host(r)}: [rank{r}]: {w}"
            else:
                yield (f"{_host(r)}: [rank{r}]: iteration {step:8d}/ 1000000 | consumed samples: {step * 1024:12d} | "
                       f"elapsed time per iteration (ms): {rng.uniform(900, 1100):.1f} | learning rate: "
                       f"{3e-4 * rng.random():.3E} | global batch size:  1024 | lm loss: {rng.uniform(1.5, 3):.6E} | "
                       f"loss scale: 65536.0 | grad norm: {rng.uniform(0.1, 2):.3f} | number of skipped iterations:   0 |")


def unfiltered(rng: random.Random):
    templates = []
    for i in range(240):
        a, b, c = rng.choice(WORDS), rng.choice(WORDS), rng.choice(ACTIONS)
        templates.append(f"INFO {a}.{b}: {c} {{k}} {a} objects from /data/{b}/part-{{p}}.arrow in {{ms}} ms "
                         f"(queue depth {{q}}, {rng.choice(WORDS)} ready)")
    t = 0
    while True:
        t += 1
        for r in range(256):
            if rng.random() < 0.5:
                continue
            tpl = templates[(r * 7 + t) % len(templates)]
            ts = f"2026-11-30 {8 + t // 3600 % 12:02d}:{t // 60 % 60:02d}:{t % 60:02d},{rng.randint(0, 999):03d}"
            body = tpl.format(k=rng.randint(1, 5000), p=rng.randint(0, 99999), ms=rng.randint(1, 900),
                              q=rng.randint(0, 64))
            yield f"{_host(r)}: [rank{r}]: {ts} {body}"


def short(rng: random.Random):
    step = 0
    while True:
        step += 1
        for r in range(8):
            yield f"{r}: iter {step}: loss {rng.uniform(1.5, 3):.4f}, time {rng.uniform(80, 140):.2f}ms"


def unknown(rng: random.Random):
    yield "| it | train loss | grad norm | tokens/s |"
    yield "|----|------------|-----------|----------|"
    step = 0
    while True:
        step += 1
        for r in range(64):
            ts = f"2026-11-30 {8 + step // 3600 % 12:02d}:{step // 60 % 60:02d}:{step % 60:02d}"
            yield (f"{_host(r)}: [rank{r}]: {ts} trainer INFO | it={step} | lm_loss={rng.uniform(1.5, 3):.4f} | "
                   f"gnorm {rng.uniform(0.1, 2):.3f} | lr={3e-4 * rng.random():.3e} | tok/s={rng.randint(9000, 13000)}")
        yield f"| {step} | {rng.uniform(1.5, 3):.4f} | {rng.uniform(0.1, 2):.3f} | {rng.randint(500000, 800000)} |"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shape", choices=SHAPES)
    ap.add_argument("--size-mb", type=float, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    target = int(args.size_mb * (1 << 20))
    gen = {"survive5": survive5, "unfiltered": unfiltered, "short": short, "unknown": unknown}[args.shape](rng)
    written = 0
    with open(args.out, "w", encoding="utf-8", newline="\n") as fh:
        buf: list[str] = []
        for line in gen:
            buf.append(line)
            written += len(line) + 1
            if len(buf) >= 4096:
                fh.write("\n".join(buf) + "\n")
                buf.clear()
            if written >= target:
                break
        buf += _failure(123)
        fh.write("\n".join(buf) + "\n")
    print(f"{args.shape}: {written / (1 << 20):.0f} MiB -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
