"""Node health probes declared as data (`rules/probes.yaml`): GPU health (nvidia-smi), DCGM
diagnostics, InfiniBand port state, storage read/write. Each runs on a node through the
scheduler's launcher (`srun -N1 -w node ...`) or locally, under its timeout; the pass condition
is its exit code plus `match`/`no_match` patterns on its output."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import regex
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

PROBES_FILE = Path(__file__).resolve().parents[2] / "rules" / "probes.yaml"


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


def run_health_probe(probe: HealthProbe, *, node: str | None = None, launcher: Launcher | None = None,
                     env: dict[str, str] | None = None) -> HealthResult:
    argv = [probe.command, *probe.args]
    remote = launcher(node and [node] or [], argv) if (launcher and node) else None
    if remote is None and shutil.which(probe.command) is None:
        return HealthResult(probe.id, node, "unavailable", None, 0.0, f"{probe.command} is not installed")
    t0 = time.monotonic()
    try:
        proc = subprocess.run(remote or argv, capture_output=True, text=True, timeout=probe.timeout_s, env=env)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode("utf-8", "replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return HealthResult(probe.id, node, "timeout", None, time.monotonic() - t0, out[-2000:])
    output = proc.stdout + proc.stderr
    if remote is not None and proc.returncode == 127 and "not found" in output:
        return HealthResult(probe.id, node, "unavailable", 127, time.monotonic() - t0, output[-2000:])
    status = "pass" if probe.passes(proc.returncode, output) else "fail"
    return HealthResult(probe.id, node, status, proc.returncode, time.monotonic() - t0, output[-2000:])
