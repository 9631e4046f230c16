import json
from pathlib import Path

from app.controller.checkpoints import choose_checkpoint


def put(path: Path, data: bytes = b"x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def megatron(root: Path, it: int, tp: int = 2, pp: int = 2, skip: tuple | None = None) -> None:
    for t in range(tp):
        for p in range(pp):
            if (t, p) != skip:
                put(root / f"iter_{it:07d}" / f"mp_rank_{t:02d}_{p:03d}" / "model_optim_rng.pt")


def test_megatron_newest_complete_before_the_failure(tmp_path):
    megatron(tmp_path, 100)
    megatron(tmp_path, 200)
    megatron(tmp_path, 300, skip=(1, 1))  # a shard missing
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("300")
    choice = choose_checkpoint(tmp_path)
    assert choice.step == 200 and choice.layout == "megatron"
    assert "missing" in choice.rejected[0][1]
    assert choose_checkpoint(tmp_path, before_step=200).step == 100


def test_megatron_directory_newer_than_the_tracker_was_mid_write(tmp_path):
    megatron(tmp_path, 100)
    megatron(tmp_path, 200)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("100\n")
    choice = choose_checkpoint(tmp_path)
    assert choice.step == 100 and "did not finish" in choice.rejected[0][1]


def test_deepspeed_zero_shards(tmp_path):
    for step, ranks in ((10, 4), (20, 3)):
        d = tmp_path / f"global_step{step}"
        put(d / "mp_rank_00_model_states.pt")
        for r in range(ranks):
            put(d / f"bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt")
    put(tmp_path / "global_step20" / "bf16_zero_pp_rank_5_mp_rank_00_optim_states.pt")  # 3,4 missing
    (tmp_path / "latest").write_text("global_step20")
    assert choose_checkpoint(tmp_path).step == 10


def test_hf_checkpoint_with_a_missing_weight_shard_or_temp_file(tmp_path):
    for step in (500, 1000, 1500):
        d = tmp_path / f"checkpoint-{step}"
        put(d / "trainer_state.json", b"{}")
        put(d / "model.safetensors.index.json", json.dumps(
            {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}).encode())
        put(d / "model-00001-of-00002.safetensors")
        if step != 1000:
            put(d / "model-00002-of-00002.safetensors")
    put(tmp_path / "checkpoint-1500" / "optimizer.pt.tmp")
    choice = choose_checkpoint(tmp_path)
    assert choice.step == 500
    assert [why for _, why in choice.rejected][0].startswith("temporary file")


def test_torch_dcp_and_internevo(tmp_path):
    for step in (1, 2):
        put(tmp_path / "dcp" / f"step_{step}" / "__0_0.distcp")
    put(tmp_path / "dcp" / "step_1" / ".metadata")  # step_2 has no .metadata: not finished
    assert choose_checkpoint(tmp_path / "dcp").step == 1
    for step in (100, 200):
        d = tmp_path / "ie" / str(step)
        for t in range(2):
            put(d / f"model_tp{t}_pp0.pt")
        if step == 100:
            put(d / "context.pt")
    assert choose_checkpoint(tmp_path / "ie").step == 100


def test_empty_file_and_nothing_usable(tmp_path):
    megatron(tmp_path, 100)
    (tmp_path / "iter_0000100" / "mp_rank_00_000" / "model_optim_rng.pt").write_bytes(b"")
    assert choose_checkpoint(tmp_path) is None
    assert choose_checkpoint(tmp_path / "missing") is None


def test_space_says_whether_the_next_checkpoint_fits(tmp_path):
    import subprocess

    from app.controller.checkpoints import space

    assert space(tmp_path) is None  # nothing to size yet
    shard = tmp_path / "iter_0000020" / "mp_rank_00"
    shard.mkdir(parents=True)
    (shard / "model_optim_rng.pt").write_bytes(b"w" * 300_000)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("20")
    free, need = space(tmp_path)
    assert need == 300_000 and free > need
    # a real full filesystem (a small tmpfs), where mounting is allowed
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "t", str(mnt)], capture_output=True).returncode:
        return
    try:
        shard = mnt / "iter_0000020" / "mp_rank_00"
        shard.mkdir(parents=True)
        (shard / "model_optim_rng.pt").write_bytes(b"w" * 400_000)
        with (mnt / "filler").open("wb") as f:
            try:
                f.write(b"\0" * (1 << 20))
            except OSError:
                pass  # ENOSPC: full
        free, need = space(mnt)
        assert free < need == 400_000
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
