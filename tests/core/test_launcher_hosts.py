"""A multi-node job launched through pdsh (DeepSpeed's multi-node runner) writes every line behind
the node's address, `10.0.0.15: [rank37]:...`: the diagnosis names that host for the failing line,
and the NCCL init lines behind the prefix still map ranks to hosts."""

from __future__ import annotations

import io

import pytest

from app.core.pipeline import Pipeline
from app.core.placement import RankHosts

NODES, GPUS = 8, 8
IPS = [f"10.0.0.{n + 11}" for n in range(NODES)]  # as genlog.py: rank 37 runs on node 4, 10.0.0.15


def _prefix(rank: int) -> str:
    return f"{IPS[rank // GPUS]}: [rank{rank}]:"


def _nccl_init(rank: int) -> str:
    node, dev = divmod(rank, GPUS)
    return (f"{_prefix(rank)}node-{node:03d}:{30000 + rank}:{30000 + rank} [{dev}] NCCL INFO comm 0x{rank + 16:08x} "
            f"rank {rank} nranks {NODES * GPUS} cudaDev {dev} nvmlDev {dev} busId {0x18 + dev * 0x10:x}000 "
            f"commId 0x1b2c3d4e5f607182 - Init COMPLETE")


def genlog_style(failing: int = 37) -> str:
    """Start-up, metrics from every rank, then the failure burst of the benchmark generator:
    a CUDA error on one rank, watchdog aborts on its peers, torchrun's SIGTERMs and summary."""
    ranks = range(NODES * GPUS)
    lines = [f"{ip}: W0521 09:00:00.000000 1005 torch/distributed/run.py:779] Setting OMP_NUM_THREADS environment "
             "variable for each process to be 1 in default" for ip in IPS]
    lines += [_nccl_init(r) for r in ranks]
    for step in range(1, 200):
        lines += [f"{_prefix(r)}step: {step}  loss: {2.0 + 1 / step:.4f}  memory: 61.20GiB(77.33%)  tps: 3,412  "
                  f"tflops: 401.11  mfu: 40.56%" for r in ranks]
    lines += [f"{_prefix(r)}/usr/local/lib/python3.10/dist-packages/torch/utils/data/dataloader.py:558: UserWarning: "
              "This DataLoader will create 8 worker processes in total." for r in ranks]
    p = _prefix(failing)
    lines += [
        f"{p}Traceback (most recent call last):",
        f'{p}  File "/workspace/Megatron-LM/pretrain_gpt.py", line 243, in <module>',
        f"{p}    pretrain(",
        f"{p}RuntimeError: CUDA error: an illegal memory access was encountered",
        f"{p}CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
        "below might be incorrect.",
    ]
    lines += [f"{_prefix(r)}[E0521 09:20:10.489887 1923 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught "
              "collective operation timeout: WorkNCCL(SeqNum=4242, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
              "Timeout(ms)=600000) ran for 600027 milliseconds before timing out." for r in ranks if r != failing]
    lines += [f"{ip}: W0521 09:20:15.489887 1005 torch/distributed/elastic/multiprocessing/api.py:858] Sending "
              f"process {30000 + n} closing signal SIGTERM" for n, ip in enumerate(IPS)]
    lines.append(f"pdsh@node-000: {IPS[failing // GPUS]}: ssh exited with exit code 1")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def diagnosed():
    return Pipeline().diagnose(io.BytesIO(genlog_style().encode()))


def test_the_failing_line_names_the_host_of_its_launcher_prefix(diagnosed):
    rc = diagnosed.diagnosis.root_cause
    assert rc.error_type.value == "CUDAError"
    first = rc.evidence[0]
    assert "illegal memory access" in first.text
    assert (first.rank, first.host) == (37, "10.0.0.15")
    # the peers' watchdog timeouts name their own hosts, never the failing one's address as theirs
    occ = [o for o in diagnosed.compressed.occurrences if o.rank is not None and o.rank != 37]
    assert occ and all(o.host == f"10.0.0.{o.rank // GPUS + 11}" for o in occ)


def test_master_and_peer_addresses_in_messages_are_not_hosts(diagnosed):
    log = diagnosed.compressed
    assert set(log.known_hosts) <= set(IPS) | {f"node-{n:03d}" for n in range(NODES)}
    assert "10.0.0.1" not in log.known_hosts


def test_nccl_init_lines_behind_the_launcher_prefix_map_ranks_to_hosts(diagnosed):
    assert diagnosed.compressed.rank_hosts == {r: f"node-{r // GPUS:03d}" for r in range(NODES * GPUS)}
    rh = RankHosts()
    data = (_nccl_init(37) + "\n").encode()
    rh.scan(data, len(data))
    assert (rh.world, rh.hosts) == (NODES * GPUS, {37: "node-004"})
