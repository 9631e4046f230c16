"""An isolate action names the host(s) to drain: from the log's NCCL init lines, from the
registered job's placement, or it does not say isolate."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from app.core import compress as compress_mod
from app.core.pipeline import Pipeline
from app.core import placement as placement_mod
from app.core.placement import JobPlacement, RankHosts
from app.core.types import ActionKind

REPO = Path(__file__).resolve().parents[2]
RULES_MIN = REPO / "tests" / "data" / "rules_min"
ECC = "[rank{r}]: RuntimeError: CUDA error: uncorrectable ECC error encountered"


def nccl_init(rank: int, nranks: int, host: str, local: int) -> str:
    return (f"{host}:{4100 + rank}:{4200 + rank} [{local}] NCCL INFO comm 0x55d4c8a{rank:02x}0 rank {rank} "
            f"nranks {nranks} cudaDev {local} nvmlDev {local} busId 18000 commId 0x3f1c2d4e5f60718a - Init COMPLETE")


@pytest.fixture(scope="module")
def pipeline() -> Pipeline:
    return Pipeline(rules_dir=RULES_MIN)


def _log(*lines: str) -> io.BytesIO:
    return io.BytesIO(("\n".join(lines) + "\n").encode())


def test_the_bundled_sample_names_the_host_of_the_failing_rank():
    d = Pipeline().diagnose(REPO / "examples" / "sample_job.log").diagnosis
    assert d.root_cause.error_type.value == "ECCError"
    assert (d.action.kind, d.action.suspect_ranks, d.action.suspect_hosts) == (
        ActionKind.ISOLATE_AND_RESTART, [5], ["node-01"])
    assert "NCCL init lines" in d.action.reason


def test_world_communicator_maps_ranks_sub_communicators_do_not(pipeline):
    # tensor-parallel groups of 4 print ranks 0..3 on every node; the world communicator has 16
    lines = [nccl_init(r % 4, 4, f"node-{r // 4:02d}", r % 4) for r in range(16)]
    lines += [nccl_init(r, 16, f"node-{r // 4:02d}", r % 4) for r in range(16)]
    lines += [nccl_init(r % 4, 4, f"node-{3 - r // 4:02d}", r % 4) for r in range(16)]
    lines += [ECC.format(r=9)]
    d = pipeline.diagnose(_log(*lines)).diagnosis
    assert (d.action.kind, d.action.suspect_hosts) == (ActionKind.ISOLATE_AND_RESTART, ["node-02"])


def test_registered_job_placement_names_the_host(pipeline):
    log = [f"iteration {i}/ 100 | lm loss: 2.0E+00 |" for i in range(5)] + [ECC.format(r=9)]
    job = JobPlacement(hosts=("gpu-a", "gpu-b"), gpu_count=16)
    d = pipeline.diagnose(_log(*log), job=job).diagnosis
    assert (d.action.kind, d.action.suspect_ranks, d.action.suspect_hosts) == (
        ActionKind.ISOLATE_AND_RESTART, [9], ["gpu-b"])
    assert "8 ranks per host" in d.action.reason
    single = pipeline.diagnose(_log(*log), job=JobPlacement(hosts=("gpu-z",), gpu_count=None)).diagnosis
    assert single.action.suspect_hosts == ["gpu-z"]


def test_no_host_anywhere_means_no_isolate(pipeline):
    log = [f"iteration {i}/ 100 | lm loss: 2.0E+00 |" for i in range(5)] + [ECC.format(r=9)]
    for job in (None, JobPlacement(hosts=("a", "b", "c"), gpu_count=16), JobPlacement()):
        d = pipeline.diagnose(_log(*log), job=job).diagnosis
        assert d.root_cause.error_type.value == "ECCError"
        assert (d.action.kind, d.action.suspect_hosts, d.action.suspect_ranks) == (ActionKind.INVESTIGATE, [], [9])
        assert "no host can be named" in d.action.reason


def test_rank_hosts_survive_the_parallel_byte_ranges(tmp_path, monkeypatch, pipeline):
    filler = [f"iteration {i}/ 100000 | lm loss: 2.0E+00 |" for i in range(30_000)]
    lines = [nccl_init(r, 8, f"node-{r // 4}", r % 4) for r in range(4)] + filler
    lines += [nccl_init(r, 8, f"node-{r // 4}", r % 4) for r in range(4, 8)] + filler + [ECC.format(r=6)]
    path = tmp_path / "job.log"
    path.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(compress_mod, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(placement_mod, "SCAN_BYTES", 1 << 30)  # the init lines are in both ranges
    log = pipeline.compress(path, workers=2)
    assert log.rank_hosts == {r: f"node-{r // 4}" for r in range(8)}
    d = pipeline.diagnose_compressed(log).diagnosis
    assert d.action.suspect_hosts == ["node-1"]


def test_init_lines_are_looked_for_at_the_start_of_the_log_only(monkeypatch, pipeline):
    monkeypatch.setattr(placement_mod, "SCAN_BYTES", 64 * 1024)
    filler = [f"iteration {i}/ 100000 | lm loss: 2.0E+00 |" for i in range(10_000)]
    inits = [nccl_init(r, 8, "node-a", r) for r in range(8)]
    early = compress_mod.compress_source(_log(*inits, *filler), pipeline.ruleset, chunk_size=16 * 1024)
    late = compress_mod.compress_source(_log(*filler, *inits), pipeline.ruleset, chunk_size=16 * 1024)
    assert (len(early.rank_hosts), late.rank_hosts) == (8, {})


def test_rank_hosts_scan_reads_only_init_lines():
    rh = RankHosts()
    text = ("\n".join([nccl_init(3, 8, "node-7", 3), "rank 4 nranks 8 without a prefix",
                       "node-9:1:2 [0] NCCL INFO comm 0x1 rank 9 nranks 8 out of range"]) + "\n").encode()
    rh.scan(text, len(text))
    assert (rh.world, rh.hosts) == (8, {3: "node-7"})
