"""One interface for Slurm, Kubernetes and local jobs. The controller only talks to this."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

RESTART_FILE = "logdx-restart.json"


class SchedulerError(RuntimeError):
    """A scheduler command failed; the message carries the command and its output."""


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    state: str  # the scheduler's own word (RUNNING, PENDING, FAILED, ...), upper case
    nodes: tuple[str, ...] = ()
    workdir: str | None = None
    checkpoint_dir: str | None = None
    restarts: int = 0
    node_count: int = 0  # nodes the job asks for (0: as many as `nodes`)
    exit_code: str | None = None  # "exit:signal" once the job ended (Slurm's ExitCode), else None
    reason: str | None = None  # the scheduler's reason for the state (Slurm: TimeLimit, NodeDown, ...)
    raw: dict = field(default_factory=dict)


@dataclass(frozen=True)
class NodeInfo:
    name: str
    state: str  # IDLE, ALLOCATED, MIXED, DRAIN, DRAINED, DOWN, ... (upper case)
    reason: str | None = None

    @property
    def drained(self) -> bool:
        return any(w in self.state for w in ("DRAIN", "DOWN", "CORDON", "FAIL"))


@dataclass(frozen=True)
class RestartSpec:
    """What the job needs to restart right: where to resume and which data to skip."""

    checkpoint: str | None = None
    checkpoint_step: int | None = None
    skip_batches: tuple[int, int] | None = None
    exclude: tuple[str, ...] = ()
    reason: str = ""
    # the scheduler's restart count of the run this spec is for (Slurm: SLURM_RESTART_COUNT after
    # the requeue); a launcher started under another count ignores it: a later restart (a person's
    # requeue, Slurm's own) must not reload an old checkpoint or skip data again
    restart_count: int | None = None

    def write(self, workdir: str | Path) -> Path:
        """The restart file the job's launcher reads ($LOGDX_RESTART_FILE or ./logdx-restart.json)."""
        path = Path(workdir) / RESTART_FILE
        tmp = path.with_suffix(".tmp")
        data = asdict(self)
        data["skip_batches"] = list(self.skip_batches) if self.skip_batches else None
        data["exclude"] = list(self.exclude)
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)
        return path


@runtime_checkable
class Scheduler(Protocol):
    name: str

    def job(self, job_id: str) -> JobInfo: ...

    def nodes(self) -> dict[str, NodeInfo]: ...

    def drain(self, node: str, *, reason: str) -> None: ...

    def resume(self, node: str, *, reason: str) -> None: ...

    def requeue(self, job_id: str, *, restart: RestartSpec, delay_s: float = 0.0) -> None:
        """Restart the job (after `delay_s`), without the excluded nodes."""
        ...

    def probe_command(self, nodes: Sequence[str], argv: Sequence[str]) -> list[str] | None:
        """The command that runs `argv` once on each of `nodes` (srun -N2 -w a,b ...), or None
        when this scheduler runs probe workers itself (local processes, pods). A scheduler that
        can run several tasks per node takes `tasks_per_node=G` too (one probe rank per GPU)."""
        ...


class RecordingScheduler:
    """Dry-run: reads pass through to the real scheduler, changes are only recorded."""

    def __init__(self, inner: Scheduler) -> None:
        self.inner = inner
        self.name = inner.name
        self.commands: list[dict] = []

    def job(self, job_id: str) -> JobInfo:
        return self.inner.job(job_id)

    def nodes(self) -> dict[str, NodeInfo]:
        return self.inner.nodes()

    def drain(self, node: str, *, reason: str) -> None:
        self.commands.append({"op": "drain", "node": node, "reason": reason})

    def resume(self, node: str, *, reason: str) -> None:
        self.commands.append({"op": "resume", "node": node, "reason": reason})

    def requeue(self, job_id: str, *, restart: RestartSpec, delay_s: float = 0.0) -> None:
        self.commands.append({"op": "requeue", "job_id": job_id, "restart": asdict(restart), "delay_s": delay_s})

    def probe_command(self, nodes: Sequence[str], argv: Sequence[str], **kwargs) -> list[str] | None:
        return self.inner.probe_command(nodes, argv, **kwargs)

    def stack_dump(self, job_id: str) -> dict[str, str]:
        """Read-only, so a dry run takes the dumps too."""
        fn = getattr(self.inner, "stack_dump", None)
        return fn(job_id) if fn else {}
