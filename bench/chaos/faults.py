"""The fault injectors: each does to the running training job what the real fault does, where
that can be done on one machine, and says what a right recovery is.

| family      | what is done                                                           | stand-in? |
|-------------|------------------------------------------------------------------------|-----------|
| node_loss   | SIGKILL of one rank; its node's probe workers die at start (a dead node)| probe side |
| bad_node    | the rank on one node fails as a GPU with ECC errors does; that node's   | yes: no GPU |
|             | probe workers send corrupt data (LOGDX_PROBE_FAULTS_FILE)              |           |
| hang        | SIGSTOP of every rank (a frozen job: no error, no progress)            | real      |
| collective  | SIGSTOP of one rank: its peers' allreduce never completes; gloo's      | real      |
|             | timeout (--dist-timeout-s 10) fires                                    |           |
| disk_full   | the checkpoint tmpfs filled up to 64 KiB: the next torch.save fails    | real      |
| store_drop  | the object store resets every connection for 6 s (checkpoint upload)   | real      |
| nan         | the data batch of an iteration 5 steps ahead makes the loss NaN         | real (data) |
| key_error   | a code path reached 5 steps ahead raises KeyError                      | real (bug) |
| host_oom    | RLIMIT_AS of one rank set just above its use (prlimit), then the rank   | limit real, |
|             | needs 512 MiB more (a leaking loader): the allocation fails             | growth injected |

The node faults (node_loss, bad_node) stay until a person repairs the node (the campaign's
"human" resumes it once the job runs again); the others end with the attempt they hit, except
the deterministic ones (disk_full, nan, key_error), which fail every run that reaches them until
they are fixed (space freed, the code fixed) or avoided (the batch skipped).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

FAMILIES = ("node_loss", "bad_node", "hang", "collective", "disk_full", "store_drop", "nan", "key_error", "host_oom")

# what a right recovery does, per family: the controller's action, the nodes it must drain
RIGHT_ACTIONS = {
    # a SIGKILLed rank reads as a node failure (srun's "Killed" first) or as a network error
    # between the ranks (the peer's gloo reset first): both probe, drain the node, restart
    # without it; the drain itself is checked apart
    "node_loss": {"isolate_and_restart", "retry"},
    "bad_node": {"isolate_and_restart"},
    "hang": {"capture_and_restart", "isolate_and_restart"},
    "collective": {"isolate_and_restart", "capture_and_restart", "retry"},
    "disk_full": {"notify_owner", "notify_admin"},
    "store_drop": {"retry"},
    "nan": {"rollback_and_skip"},
    "key_error": {"notify_owner"},
    "host_oom": {"notify_owner"},
}
# a fault a restart cannot fix until a person acts (restarting it is waste); the others a
# restart (or a restart elsewhere) fixes
DETERMINISTIC = {"disk_full", "key_error"}
TRANSIENT = {"hang", "collective", "store_drop"}


@dataclass
class Fault:
    family: str
    t_inject: float = 0.0
    step: int | None = None          # last step seen before the injection
    node: str | None = None          # the node hit (node faults) or the rank's node
    expect_drain: set[str] = field(default_factory=set)
    detail: str = ""


class Injector:
    def __init__(self, chaos_dir: Path, ckpt: Path) -> None:
        self.dir, self.ckpt = chaos_dir, ckpt

    # -- the job's processes ------------------------------------------------------------------
    def ranks(self, ext: str, restarts: int) -> dict[int, tuple[int, str]]:
        out = {}
        for f in (self.dir / "pids").glob(f"{ext}.{restarts}.*"):
            pid, node = f.read_text().split()
            out[int(f.name.rsplit(".", 1)[1])] = (int(pid), node)
        return out

    def _faults(self) -> dict:
        try:
            return json.loads((self.dir / "faults.json").read_text())
        except (OSError, ValueError):
            return {}

    def _set(self, **kv) -> None:  # noqa: ANN003
        data = {**self._faults(), **kv}
        data = {k: v for k, v in data.items() if v is not None}
        tmp = self.dir / "faults.json.tmp"
        tmp.write_text(json.dumps(data))
        tmp.replace(self.dir / "faults.json")

    def _probe_fault(self, node: str | None, kind: str = "") -> None:
        (self.dir / "probe-faults").write_text(f"{node}={kind}\n" if node else "")

    # -- injection ----------------------------------------------------------------------------
    def inject(self, family: str, *, ext: str, restarts: int, step: int | None, rng) -> Fault:  # noqa: ANN001
        ranks = self.ranks(ext, restarts)
        rank = rng.choice(sorted(ranks))
        pid, node = ranks[rank]
        f = Fault(family, step=step, node=node)
        if family == "node_loss":
            self._probe_fault(node, "exit_before")
            f.expect_drain = {node}
            f.t_inject = time.time()
            os.kill(pid, signal.SIGKILL)
            f.detail = f"SIGKILL rank {rank} (pid {pid}) on {node}"
        elif family == "bad_node":
            self._probe_fault(node, "corrupt")
            f.expect_drain = {node}
            f.t_inject = time.time()
            self._set(bad_node=node)
            f.detail = f"{node}: its GPU stand-in fails (rank {rank}) and its probe workers corrupt data"
        elif family == "hang":
            f.t_inject = time.time()
            for p, _ in ranks.values():
                os.kill(p, signal.SIGSTOP)
            f.node = None
            f.detail = f"SIGSTOP all {len(ranks)} ranks"
        elif family == "collective":
            f.t_inject = time.time()
            os.kill(pid, signal.SIGSTOP)
            f.detail = f"SIGSTOP rank {rank} (pid {pid}) on {node}: its peers' allreduce never completes"
        elif family == "disk_full":
            st = os.statvfs(self.ckpt)
            free = st.f_bavail * st.f_frsize
            filler = self.ckpt / "filler.bin"
            f.t_inject = time.time()
            with filler.open("wb") as fh:
                fh.truncate(0)
                left = max(0, free - (64 << 10))
                chunk = b"\0" * (1 << 20)
                while left > 0:
                    n = fh.write(chunk[:min(left, len(chunk))])
                    left -= n
            f.node = None
            f.detail = f"checkpoint tmpfs filled ({free >> 10} KiB were free)"
        elif family == "store_drop":
            f.t_inject = time.time()
            (self.dir / "store-drop-until").write_text(str(time.time() + 6))
            f.node = None
            f.detail = "object store resets connections for 6 s"
        elif family == "nan":
            at = (step or 0) + 5
            f.t_inject = time.time()
            self._set(nan_batch=at)
            f.node = None
            f.detail = f"batch of iteration {at} makes the loss NaN"
        elif family == "key_error":
            at = (step or 0) + 5
            f.t_inject = time.time()
            self._set(key_error=at)
            f.node = None
            f.detail = f"KeyError raised at iteration {at}"
        elif family == "host_oom":
            vm = _vm_size(pid)
            f.t_inject = time.time()
            subprocess.run(["prlimit", f"--pid={pid}", f"--as={vm + (64 << 20)}"], check=True)
            self._set(grow=node)
            f.detail = (f"RLIMIT_AS of rank {rank} (pid {pid}) on {node} set to its {vm >> 20} MiB + 64 MiB; "
                        "it then needs 512 MiB more")
        else:
            raise ValueError(f"unknown fault family {family!r}; known: {', '.join(FAMILIES)}")
        return f

    # -- the person who repairs ----------------------------------------------------------------
    def repair_transient(self, fault: Fault) -> None:
        """What ends by itself: nothing to do (the store comes back after its window)."""

    def repair(self, fault: Fault) -> list[str]:
        """What a person does after an escalation or a drain: free the disk, fix the code, clear
        the bad batch, replace the bad node. Returns what was done."""
        done = []
        if fault.family in ("node_loss", "bad_node"):
            self._probe_fault(None)
            self._set(bad_node=None)
            done.append(f"repaired {fault.node}")
        if fault.family == "disk_full":
            (self.ckpt / "filler.bin").unlink(missing_ok=True)
            done.append("freed the checkpoint disk")
        if fault.family == "key_error":
            self._set(key_error=None)
            done.append("fixed the code")
        if fault.family == "host_oom":
            self._set(grow=None)
            done.append("gave the job its memory back")
        if fault.family == "nan":
            self._set(nan_batch=None)
            done.append("removed the bad sample")
        return done

    def clear_all(self) -> None:
        self._probe_fault(None)
        (self.dir / "faults.json").unlink(missing_ok=True)
        (self.ckpt / "filler.bin").unlink(missing_ok=True)
        (self.dir / "store-drop-until").unlink(missing_ok=True)


def _vm_size(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmSize for pid {pid}")
