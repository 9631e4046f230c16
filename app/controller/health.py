"""Node health probes declared as data (`rules/probes.yaml`): GPU health (nvidia-smi), DCGM
diagnostics, InfiniBand port state, storage read/write. Each runs on a node through the
scheduler's launcher (`srun -N1 -w node ...`) or locally, under its timeout; the pass condition
is its exit code plus `match`/`no_match` patterns on its output."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import regex
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app import resources

PROBES_FILE = resources.data_file("rules", "probes.yaml")  # the shipped health probes


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PassCondition(_Strict):
    exit_code: int = 0
    match: str | None = None
    no_match: str | None = None


class ProbeExamples(_Strict):
    pass_: list[str] = Field(default_factory=list, alias="pass")
    fail: list[str] = Field(default_factory=list)


class HealthProbe(_Strict):
    id: str
    command: str
    args: list[str] = Field(default_factory=list)
    timeout_s: float = Field(default=60, gt=0, le=3600)
    pass_: PassCondition = Field(alias="pass")
    examples: ProbeExamples = ProbeExamples()

    def passes(self, exit_code: int, output: str) -> bool:
        cond = self.pass_
        if exit_code != cond.exit_code:
            return False
        if cond.match and not regex.search(cond.match, output):
            return False
        return not (cond.no_match and regex.search(cond.no_match, output))


class ProbeFile(_Strict):
    kind: str
    family: str
    description: str = ""
    probes: list[HealthProbe]


class ProbeFileError(ValueError):
    pass


def load_health_probes(path: Path | str | None = None) -> list[HealthProbe]:
    path = Path(path or PROBES_FILE)
    try:
        probes = ProbeFile.model_validate(yaml.safe_load(path.read_text(encoding="utf-8"))).probes
        for p in probes:
            for pattern in (p.pass_.match, p.pass_.no_match):
                if pattern:
                    regex.compile(pattern)
    except (OSError, yaml.YAMLError, ValidationError, regex.error) as exc:
        raise ProbeFileError(f"{path}: {exc}") from exc
    for p in probes:
        bad = [o for o in p.examples.pass_ if not p.passes(p.pass_.exit_code, o)]
        bad += [o for o in p.examples.fail if p.passes(p.pass_.exit_code, o)]
        if bad:
            raise ProbeFileError(f"{path}: probe {p.id}: example judged wrongly: {bad[0][:100]!r}")
    return probes


@dataclass(frozen=True)
class HealthResult:
    probe_id: str
    node: str | None
    status: str  # pass | fail | unavailable | timeout
    exit_code: int | None
    duration_s: float
    output_tail: str


Launcher = Callable[[Sequence[str], Sequence[str]], "list[str] | None"]

# printed on the node before the check itself: output without it means the launcher never ran
# the check there (srun got no allocation: the node is busy), which says nothing about the node
STARTED = "logdx-health-started"
FAILING = frozenset({"fail", "timeout"})


def run_health_probe(probe: HealthProbe, *, node: str | None = None, launcher: Launcher | None = None,
                     env: dict[str, str] | None = None) -> HealthResult:
    """Run one check, on `node` through `launcher` (srun -N1 -w node ...) or here. `pass`/`fail`
    by its pass condition; `timeout` when it started and did not finish (a GPU check that hangs
    is a sick GPU); `unavailable` when it could not run at all: its tool is not installed, or the
    launcher did not start it (busy node) - unknown, never failed."""
    argv = [probe.command, *probe.args]
    remote = None
    if launcher and node:
        remote = launcher([node], ["sh", "-c", f'echo {STARTED}; exec "$@"', "logdx-health", *argv])
    if remote is None and shutil.which(probe.command) is None:
        return HealthResult(probe.id, node, "unavailable", None, 0.0, f"{probe.command} is not installed")
    t0 = time.monotonic()
    proc = subprocess.Popen(remote or argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", env=env, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=probe.timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        # SIGTERM first: srun passes it on to the step on the node and ends it
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            output, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
        timed_out = True
    took = time.monotonic() - t0
    output = output or ""
    if remote is not None:
        if STARTED not in output:
            why = "not started on the node within its timeout" if timed_out else f"not started (exit {proc.returncode})"
            return HealthResult(probe.id, node, "unavailable", proc.returncode, took, f"{why}: {output[-1900:]}")
        output = output.replace(STARTED + "\n", "", 1)
    if timed_out:
        return HealthResult(probe.id, node, "timeout", None, took, output[-2000:])
    if proc.returncode == 127 and "not found" in output:
        return HealthResult(probe.id, node, "unavailable", 127, took, output[-2000:])
    status = "pass" if probe.passes(proc.returncode, output) else "fail"
    return HealthResult(probe.id, node, status, proc.returncode, took, output[-2000:])


def check_hosts(probes: Sequence[HealthProbe], hosts: Sequence[str], *, launcher: Launcher | None,
                env: dict[str, str] | None = None, parallel: int = 8) -> dict[str, list[HealthResult]]:
    """Every probe on every host (hosts in parallel, a host's probes one after the other)."""
    def one(host: str) -> list[HealthResult]:
        # run here (no launcher: a local scheduler's nodes are names on this machine), a check
        # learns which node it stands for from LOGDX_NODE, as srun's tasks do from SLURMD_NODENAME
        here = None if launcher else {**(env or os.environ), "LOGDX_NODE": host}
        return [run_health_probe(p, node=host if launcher else None, launcher=launcher, env=here or env)
                for p in probes]

    hosts = list(dict.fromkeys(hosts))
    if not hosts:
        return {}
    with ThreadPoolExecutor(max_workers=min(parallel, len(hosts))) as pool:
        return dict(zip(hosts, pool.map(one, hosts), strict=True))


def host_status(results: Sequence[HealthResult]) -> str:
    """fail: a check failed or hung; pass: one passed and none failed; unknown: none could run."""
    if any(r.status in FAILING for r in results):
        return "fail"
    return "pass" if any(r.status == "pass" for r in results) else "unknown"
