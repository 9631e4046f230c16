"""Checkpoint choice: the newest complete checkpoint before the failure (or the loss-spike onset).

Layouts recognised (one checkpoint directory per saved step):
- Megatron-LM: `iter_0000100/` with `mp_rank_TT[_PPP]/model_optim_rng.pt` (or a torch_dist
  `.metadata` inside), tracker `latest_checkpointed_iteration.txt`;
- DeepSpeed: `global_step100/` with `mp_rank_MM_model_states.pt` and
  `*zero_pp_rank_R_mp_rank_MM_optim_states.pt`, tracker `latest`;
- Hugging Face Trainer: `checkpoint-100/` with `trainer_state.json` and the weights (every file of a
  `*.index.json` weight map present);
- torch.distributed.checkpoint: a directory with `.metadata` and `*.distcp` shards (the
  coordinator writes `.metadata` after every shard);
- InternEvo: a numeric step directory with `model_tp*_pp*.pt` and `context.pt` (written last).

A checkpoint is complete when every shard of its grid is present, no file is empty or a
temporary, and it is not newer than the framework's own tracker file (the tracker is written
after all ranks finished saving, so a newer directory was being written when the job died).
Pure: reads the directory tree (and, for `space`, the filesystem's free space) only.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

_TMP = re.compile(r"(\.tmp|\.part|\.partial|\.incomplete|\.lock|~)$|^\.?tmp", re.IGNORECASE)


@dataclass(frozen=True)
class Candidate:
    path: Path
    step: int
    layout: str


@dataclass
class CheckpointChoice:
    path: str
    step: int
    layout: str
    note: str
    rejected: list[tuple[str, str]] = field(default_factory=list)


def _files(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file()]


def _common_problems(path: Path) -> str | None:
    files = _files(path)
    if not files:
        return "empty directory"
    for f in files:
        if _TMP.search(f.name):
            return f"temporary file {f.relative_to(path)} (still being written)"
        if f.stat().st_size == 0:
            return f"empty file {f.relative_to(path)}"
    return None


def _grid_complete(indices: set[tuple[int, ...]]) -> str | None:
    """Every combination of 0..max along each axis is present."""
    if not indices:
        return "no shards"
    dims = len(next(iter(indices)))
    maxes = [max(i[d] for i in indices) for d in range(dims)]
    expected = 1
    for m in maxes:
        expected *= m + 1
    if len(indices) != expected:
        missing = expected - len(indices)
        return f"{missing} shard(s) missing from a {'x'.join(str(m + 1) for m in maxes)} grid"
    return None


def _tracker(root: Path, name: str) -> int | None:
    f = root / name
    if not f.is_file():
        return None
    text = f.read_text(errors="replace").strip()
    m = re.search(r"(\d+)", text)
    return int(m.group(1)) if m else None


def _check_megatron(path: Path) -> str | None:
    shards = {tuple(int(x) for x in re.findall(r"\d+", d.name)) for d in path.glob("mp_rank_*")
              if (d / "model_optim_rng.pt").is_file()}
    dirs = list(path.glob("mp_rank_*"))
    if dirs and len(shards) != len(dirs):
        return "an mp_rank directory lacks model_optim_rng.pt"
    if not dirs:
        return None if (path / ".metadata").is_file() else "no mp_rank_* shards and no .metadata"
    return _grid_complete(shards)


def _check_deepspeed(path: Path) -> str | None:
    models = {(int(m.group(1)),) for f in path.glob("mp_rank_*_model_states.pt")
              if (m := re.match(r"mp_rank_(\d+)_model_states\.pt$", f.name))}
    if not models:
        return "no mp_rank_*_model_states.pt"
    problem = _grid_complete(models)
    optim = {(int(m.group(1)), int(m.group(2))) for f in path.glob("*optim_states.pt")
             if (m := re.search(r"zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt$", f.name))}
    return problem or (_grid_complete(optim) if optim else None)


def _check_hf(path: Path) -> str | None:
    if not (path / "trainer_state.json").is_file():
        return "no trainer_state.json (the Trainer writes it last)"
    for index in path.glob("*.index.json"):
        try:
            weight_map = json.loads(index.read_text()).get("weight_map", {})
        except (OSError, ValueError):
            return f"unreadable {index.name}"
        missing = sorted({f for f in weight_map.values() if not (path / f).is_file()})
        if missing:
            return f"{len(missing)} weight shard(s) missing: {missing[:3]}"
    if not any(path.glob("*.safetensors")) and not any(path.glob("*.bin")) and not any(path.glob("*.pt")):
        return "no weight files"
    return None


def _check_dcp(path: Path) -> str | None:
    if not (path / ".metadata").is_file():
        return "no .metadata (the coordinator writes it after every shard)"
    if not any(path.glob("*.distcp")):
        return "no .distcp shards"
    return None


def _check_internevo(path: Path) -> str | None:
    models = {tuple(int(x) for x in m.groups()) for f in path.glob("model_tp*_pp*.pt")
              if (m := re.match(r"model_tp(\d+)_pp(\d+)\.pt$", f.name))}
    if not models:
        return "no model_tp*_pp*.pt"
    if not (path / "context.pt").is_file():
        return "no context.pt (written last)"
    return _grid_complete(models)


_LAYOUTS = [
    ("megatron", re.compile(r"^iter_(\d+)$"), _check_megatron, "latest_checkpointed_iteration.txt"),
    ("deepspeed", re.compile(r"^global_step(\d+)$"), _check_deepspeed, "latest"),
    ("hf", re.compile(r"^checkpoint-(\d+)$"), _check_hf, None),
    ("internevo", re.compile(r"^(\d+)$"), _check_internevo, None),
    ("dcp", re.compile(r"^(?:step|iter|ckpt|checkpoint)[_-]?(\d+)$"), _check_dcp, None),
]


def candidates(root: Path) -> list[Candidate]:
    out = []
    for child in root.iterdir() if root.is_dir() else []:
        if not child.is_dir():
            continue
        for layout, rx, _, _ in _LAYOUTS:
            m = rx.match(child.name)
            if m:
                out.append(Candidate(child, int(m.group(1)), layout))
                break
    return sorted(out, key=lambda c: c.step, reverse=True)


def check(candidate: Candidate, root: Path) -> str | None:
    """Why this checkpoint is not usable, or None when it is complete."""
    _, _, checker, tracker_name = next(x for x in _LAYOUTS if x[0] == candidate.layout)
    if tracker_name:
        tracked = _tracker(root, tracker_name)
        if tracked is not None and candidate.step > tracked:
            return f"newer than {tracker_name} ({tracked}): the save did not finish"
    if candidate.layout == "megatron" and (candidate.path / ".metadata").is_file():
        checker = _check_dcp if not list(candidate.path.glob("mp_rank_*")) else checker
    return _common_problems(candidate.path) or checker(candidate.path)


def choose_checkpoint(root: str | Path, *, before_step: int | None = None) -> CheckpointChoice | None:
    """The newest complete checkpoint under `root` saved strictly before `before_step` (the
    failure or spike onset); None when there is none. `rejected` says why newer ones were skipped.

    A root that is itself one torch.distributed.checkpoint directory is returned as is."""
    root = Path(root)
    rejected: list[tuple[str, str]] = []
    for cand in candidates(root):
        if before_step is not None and cand.step >= before_step:
            rejected.append((str(cand.path), f"step {cand.step} is not before step {before_step}"))
            continue
        problem = check(cand, root)
        if problem:
            rejected.append((str(cand.path), problem))
            continue
        note = f"{cand.layout} checkpoint at step {cand.step}"
        if rejected:
            note += f"; skipped {len(rejected)} newer"
        return CheckpointChoice(str(cand.path), cand.step, cand.layout, note, rejected)
    if (root / ".metadata").is_file() and not _check_dcp(root) and not _common_problems(root):
        return CheckpointChoice(str(root), -1, "dcp", "a single torch.distributed.checkpoint directory", rejected)
    return None


def space(root: str | Path) -> tuple[int, int] | None:
    """(free bytes, bytes of the newest complete checkpoint) on the filesystem of `root`: whether
    the next save can fit. None when there is no complete checkpoint to size or `root` is not
    readable from here."""
    try:
        choice = choose_checkpoint(root)
        if choice is None:
            return None
        need = sum(f.stat().st_size for f in _files(Path(choice.path)))
        st = os.statvfs(root)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize, need
