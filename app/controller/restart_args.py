"""The restart spec (`logdx-restart.json`) turned into a training framework's own arguments.

The controller writes the spec into the job's work directory before it requeues the job; the
job's launcher reads it at start and passes it on. The spec:

- `checkpoint`: the directory of the chosen checkpoint (Megatron `iter_0000400`, HF
  `checkpoint-400`, a DeepSpeed tag, a DCP directory), or null: start as the launcher would;
- `checkpoint_step`: its training step (iteration), or null;
- `skip_batches`: `[first, last]`, training iterations (the step counter the log prints,
  optimizer steps, not micro-batches or samples) whose data is skipped, both ends included; or
  null;
- `exclude`: nodes the job must not run on (already applied by the scheduler on Slurm);
- `reason`: why (the diagnosis' action), for the job's own log;
- `restart_count`: the scheduler's restart count of the run the spec is for (Slurm's
  `SLURM_RESTART_COUNT` once requeued), or null; a run under another count (a later requeue by a
  person or by Slurm itself) ignores the spec: it is stale.

Pure: no I/O beyond reading the spec file.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

FORMATS = ("megatron", "megatron-deepspeed", "hf", "env")
_ITER_DIR = re.compile(r"^(?:iter_|global_step)(\d+)$")


class SpecError(ValueError):
    pass


@dataclass(frozen=True)
class Spec:
    checkpoint: str | None
    checkpoint_step: int | None
    skip: tuple[int, int] | None
    exclude: tuple[str, ...]
    reason: str
    restart_count: int | None = None

    def stale(self, env: dict[str, str]) -> str | None:
        """Why this spec is not for the run `env` describes (SLURM_RESTART_COUNT, or
        LOGDX_RESTART_COUNT for other launchers), or None when it is (or nobody can tell)."""
        now = env.get("LOGDX_RESTART_COUNT") or env.get("SLURM_RESTART_COUNT")
        if self.restart_count is None or now is None or not now.strip().isdigit():
            return None
        if int(now) == self.restart_count:
            return None
        return (f"the restart spec was written for restart {self.restart_count}, this run is restart {int(now)}: "
                "ignored (stale)")


def _int(value: object, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecError(f"{name} must be a non-negative integer or null, got {value!r}")
    return value


def parse_spec(data: object) -> Spec:
    if not isinstance(data, dict):
        raise SpecError("the restart spec must be a JSON object")
    skip = data.get("skip_batches")
    if skip is not None:
        if not (isinstance(skip, list) and len(skip) == 2):
            raise SpecError(f"skip_batches must be [first, last] or null, got {skip!r}")
        first, last = (_int(v, "skip_batches") for v in skip)
        if first is None or last is None or first > last:
            raise SpecError(f"skip_batches must be [first, last] with first <= last, got {skip!r}")
        skip = (first, last)
    checkpoint = data.get("checkpoint")
    if checkpoint is not None and not isinstance(checkpoint, str):
        raise SpecError(f"checkpoint must be a path or null, got {checkpoint!r}")
    exclude = data.get("exclude") or []
    if not isinstance(exclude, list) or not all(isinstance(h, str) for h in exclude):
        raise SpecError("exclude must be a list of node names")
    return Spec(checkpoint, _int(data.get("checkpoint_step"), "checkpoint_step"), skip, tuple(exclude),
                str(data.get("reason") or ""), _int(data.get("restart_count"), "restart_count"))


def load_spec(path: str | Path) -> Spec:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SpecError(f"cannot read the restart spec {path}: {exc}") from None
    return parse_spec(data)


def _load_root(spec: Spec) -> tuple[str, int | None]:
    """Megatron's --load takes the checkpoint root and picks the iteration itself."""
    path = Path(spec.checkpoint or "")
    m = _ITER_DIR.match(path.name)
    step = spec.checkpoint_step if spec.checkpoint_step is not None else (int(m.group(1)) if m else None)
    return (str(path.parent) if m else str(path)), step


def framework_args(spec: Spec, fmt: str) -> list[str]:
    """Arguments (or, for `env`, NAME=value words) to add to the training command.

    - megatron (Megatron-LM): `--load ROOT --ckpt-step N`, `--iterations-to-skip I ...` (one
      number per skipped iteration: Megatron-LM runs a dummy step for each and counts it);
    - megatron-deepspeed (BigScience's fork): `--load ROOT`, `--skip-train-iteration-range A-B`;
      it loads the iteration named by ROOT's tracker file, which must be the chosen one;
    - hf (transformers Trainer): `--resume_from_checkpoint DIR`; the Trainer cannot skip a range
      of batches by argument, so a skip range is an error here rather than silently dropped;
    - env: LOGDX_CHECKPOINT, LOGDX_CHECKPOINT_STEP, LOGDX_SKIP_FIRST, LOGDX_SKIP_LAST,
      LOGDX_EXCLUDE for a launcher of its own.
    """
    if fmt not in FORMATS:
        raise SpecError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")
    if fmt == "env":
        env = {"LOGDX_CHECKPOINT": spec.checkpoint or "",
               "LOGDX_CHECKPOINT_STEP": "" if spec.checkpoint_step is None else str(spec.checkpoint_step),
               "LOGDX_SKIP_FIRST": str(spec.skip[0]) if spec.skip else "",
               "LOGDX_SKIP_LAST": str(spec.skip[1]) if spec.skip else "",
               "LOGDX_EXCLUDE": ",".join(spec.exclude)}
        return [f"{k}={v}" for k, v in env.items()]
    out: list[str] = []
    if fmt == "hf":
        if spec.skip:
            raise SpecError("the HF Trainer has no argument to skip a range of batches; "
                            "use --format env and skip them in the data loader")
        return ["--resume_from_checkpoint", spec.checkpoint] if spec.checkpoint else []
    if spec.checkpoint:
        root, step = _load_root(spec)
        out += ["--load", root]
        if fmt == "megatron" and step is not None:
            out += ["--ckpt-step", str(step)]
    if spec.skip:
        first, last = spec.skip
        if fmt == "megatron":
            out += ["--iterations-to-skip", *(str(i) for i in range(first, last + 1))]
        else:
            out += ["--skip-train-iteration-range", f"{first}-{last}"]
    return out


def shell_words(words: list[str]) -> str:
    return " ".join(shlex.quote(w) for w in words)
