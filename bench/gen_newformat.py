#!/usr/bin/env python3
"""A pretraining log in a trainer format that no shipped filter rule knows, ending in a failure.

The seed paper's log agent exists for exactly this: a new trainer (here a JAX-style one printing
`step N/M | ntok … | xent … | zloss … | gn … | lr … | tput … tok/s/dev | mfu …` from every host)
whose metric lines the filters do not drop, so every line takes the slow keep path, no metric
series is extracted and no progress marker is seen. The failure at the end is an uncorrectable
ECC error on one host, with a traceback.

    python bench/gen_newformat.py --steps 20000 --hosts 4 --out /tmp/newformat.log
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

FAILURE = [
    "{host}: Traceback (most recent call last):",
    '{host}:   File "/opt/trainer/train.py", line 412, in train_step',
    "{host}:     state, metrics = p_train_step(state, batch)",
    "{host}: RuntimeError: CUDA error: uncorrectable ECC error encountered",
]


def generate(out: Path, *, steps: int = 20000, hosts: int = 4, seed: int = 1, bad_host: int = 2,
             nan_at: int | None = None) -> dict:
    """Write the log; returns what was injected (error lines, last step)."""
    rng = random.Random(seed)
    lines = 0
    with open(out, "w", encoding="utf-8") as f:
        f.write("trainer: starting run llama-1b-v3 on %d hosts\n" % hosts)
        lines += 1
        for step in range(1, steps + 1):
            for h in range(hosts):
                xent = 3.5 * (0.9995 ** step) + rng.random() * 0.05
                loss = "nan" if nan_at is not None and step >= nan_at else f"{xent:.4f}"
                f.write(f"node-{h:02d}: 2024-03-01 {8 + step // 3600:02d}:{(step // 60) % 60:02d}:{step % 60:02d}."
                        f"{rng.randint(0, 999):03d} | trn | step {step:06d}/050000 | ntok {step * 1.57e6:.3e} | "
                        f"xent {loss} | zloss {rng.random() / 100:.4f} | gn {rng.random():.3f} | lr {3e-4:.2e} | "
                        f"tput {3800 + rng.random() * 50:.1f} tok/s/dev | mfu {41 + rng.random():.1f}\n")
                lines += 1
        host = f"node-{bad_host:02d}"
        errors = [t.format(host=host) for t in FAILURE]
        f.write("\n".join(errors) + "\n")
        lines += len(errors)
    return {"lines": lines, "last_step": steps, "error_lines": errors, "host": host}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    print(generate(args.out, steps=args.steps, hosts=args.hosts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
