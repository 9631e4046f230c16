"""The restart spec the controller writes, turned into a framework's own arguments by
`logdx restart-args` and the example launcher."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.controller.restart_args import SpecError, framework_args, load_spec, parse_spec
from app.controller.schedulers.base import RestartSpec

ROOT = Path(__file__).resolve().parents[2]
LOGDX = str(Path(sys.executable).with_name("logdx"))


def written(tmp_path, **fields) -> Path:
    return RestartSpec(**fields).write(tmp_path)


def test_megatron_lm_gets_the_root_the_step_and_each_skipped_iteration(tmp_path):
    path = written(tmp_path, checkpoint="/ckpt/run 7/iter_0000400", checkpoint_step=400,
                   skip_batches=(438, 441), reason="loss spike")
    args = framework_args(load_spec(path), "megatron")
    assert args == ["--load", "/ckpt/run 7", "--ckpt-step", "400",
                    "--iterations-to-skip", "438", "439", "440", "441"]
    assert framework_args(load_spec(path), "megatron-deepspeed") == [
        "--load", "/ckpt/run 7", "--skip-train-iteration-range", "438-441"]


def test_hf_resumes_from_the_directory_and_refuses_a_skip_it_cannot_do(tmp_path):
    spec = load_spec(written(tmp_path, checkpoint="/out/checkpoint-500", checkpoint_step=500))
    assert framework_args(spec, "hf") == ["--resume_from_checkpoint", "/out/checkpoint-500"]
    with pytest.raises(SpecError, match="cannot|no argument"):
        framework_args(load_spec(written(tmp_path, checkpoint="/out/checkpoint-500", skip_batches=(1, 2))), "hf")


def test_env_format_and_an_empty_spec(tmp_path):
    env = framework_args(load_spec(written(tmp_path, skip_batches=(10, 20), exclude=("node3",))), "env")
    assert env == ["LOGDX_CHECKPOINT=", "LOGDX_CHECKPOINT_STEP=", "LOGDX_SKIP_FIRST=10", "LOGDX_SKIP_LAST=20",
                   "LOGDX_EXCLUDE=node3"]
    assert framework_args(load_spec(written(tmp_path)), "megatron") == []


@pytest.mark.parametrize("bad", [[], {"skip_batches": [5, 2]}, {"skip_batches": [1]}, {"checkpoint_step": -1},
                                 {"checkpoint": 3}, {"exclude": "node1"}, {"skip_batches": [True, 2]}])
def test_a_malformed_spec_is_refused_with_its_reason(bad):
    with pytest.raises(SpecError):
        parse_spec(bad)


def test_the_example_launcher_passes_the_spec_to_the_training_command(tmp_path):
    written(tmp_path, checkpoint=str(tmp_path / "ckpt" / "iter_0000200"), checkpoint_step=200, skip_batches=(251, 253))
    train = [sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))", "--lr", "3e-4"]
    env = {**os.environ, "PATH": f"{Path(LOGDX).parent}:{os.environ['PATH']}"}
    out = subprocess.run([str(ROOT / "examples/restart_launcher.sh"), "megatron", "--", *train], cwd=tmp_path,
                         env=env, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == ["--lr", "3e-4", "--load", str(tmp_path / "ckpt"), "--ckpt-step", "200",
                                      "--iterations-to-skip", "251", "252", "253"]
    (tmp_path / "logdx-restart.json").unlink()  # a first start: the command as given
    out = subprocess.run([str(ROOT / "examples/restart_launcher.sh"), "megatron", "--", *train], cwd=tmp_path,
                         env=env, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == ["--lr", "3e-4"]


def test_the_cli_says_why_a_spec_is_bad(tmp_path):
    (tmp_path / "logdx-restart.json").write_text("{not json")
    out = subprocess.run([LOGDX, "restart-args"], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 2 and "cannot read the restart spec" in out.stderr
    out = subprocess.run([LOGDX, "restart-args", "absent.json", "--missing-ok"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout == ""


def test_a_spec_written_for_an_earlier_restart_is_stale_and_ignored(tmp_path):
    """The controller wrote the spec for restart 1; a person requeues the job later (restart 2):
    the launcher must start as it would (from the tracker), not reload the old checkpoint and
    skip the old batches again."""
    written(tmp_path, checkpoint="/ckpt/iter_0000040", checkpoint_step=40, skip_batches=(41, 241), restart_count=1)
    spec = load_spec(tmp_path / "logdx-restart.json")
    assert spec.restart_count == 1 and spec.stale({"SLURM_RESTART_COUNT": "1"}) is None
    assert spec.stale({}) is None  # nobody can tell: used
    assert "written for restart 1, this run is restart 2" in spec.stale({"SLURM_RESTART_COUNT": "2"})
    cli = [sys.executable, "-m", "app.cli", "restart-args"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(cli, cwd=tmp_path, env={**env, "SLURM_RESTART_COUNT": "2"}, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout == "" and "stale" in out.stderr, out
    out = subprocess.run(cli, cwd=tmp_path, env={**env, "SLURM_RESTART_COUNT": "1"}, capture_output=True, text=True)
    assert out.stdout.split()[:4] == ["--load", "/ckpt", "--ckpt-step", "40"], out
