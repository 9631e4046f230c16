"""The host of a line is read only where the line's format says the line comes from that host:
launcher prefixes, NCCL's host field, shell prompts, syslog. Addresses inside a message are not
the line's host."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from app.core import fields
from app.core.fields import extract_host, host_match, failed_rank_report, prompt_host, rank_match
from app.core.keptshapes import field_ranges


@pytest.mark.parametrize(("line", "host"), [
    # pdsh / DeepSpeed's multi-node runner (`deepspeed --hostfile` with IP hostfile entries)
    ("10.0.0.15: [rank37]:RuntimeError: CUDA error: an illegal memory access was encountered", "10.0.0.15"),
    ("172.17.0.3: mchorse@172.17.0.3: Permission denied (publickey,password).", "172.17.0.3"),
    ("34.16.214.62: I0515 20:03:26.569316  343449 flash_attention.cc:1908] successfully finished dry run",
     "34.16.214.62"),
    ("node-004: RuntimeError: CUDA error: an illegal memory access was encountered", "node-004"),
    # the pdsh prefix names the line's host even when NCCL's own host field follows
    ("10.0.0.15: [rank37]:node-004:30037:30037 [5] NCCL INFO Connected all rings", "10.0.0.15"),
    # syslog as a log shipper writes it in UTC (a `Z` after the time, the program without a colon)
    ("Dec 17 16:04:09Z worker-v100-7 systemd-logind Power key pressed.", "worker-v100-7"),
    # pdsh's own report about a remote host
    ("pdsh@node-000: 10.0.0.15: ssh exited with exit code 1", "10.0.0.15"),
    ("pdsh@6dca91c32bfd: 172.17.0.2: ssh exited with exit code 255", "172.17.0.2"),
    # NCCL's host behind mpirun --tag-output (and a collector's ISO timestamp)
    ("[1,4]<stdout>:gpu7:4105:4372 [0] include/socket.h:318 NCCL WARN Net : Socket creation failed",
     "gpu7"),
    ("2019-06-02T16:13:44.884Z: [1,12]<stdout>:container-e275-1553839402050-12124-01-000057:815:864 [0] "
     "transport/net_ib.cu:80 NCCL WARN NET/IB : Got async event : local catastrophic error",
     "container-e275-1553839402050-12124-01-000057"),
    ("[1,3]<stdout>:smc-gpu-03:29881:30401 [0] NCCL INFO init.cc:903 -> 5", "smc-gpu-03"),
    ("[rank3]:node-1:12:13 [0] NCCL WARN Cuda failure 'out of memory'", "node-1"),
    # shell prompts (bash, a virtualenv's prefix, zsh, RHEL's bracketed form)
    ("(venv) root@node1:~/kubespray# nvidia-smi ", "node1"),
    ("(htranstrack) wangcui@hoth:~/shared/STGTrack/H-TransTrack_test2$ nvidia-smi", "hoth"),
    ("zeyer@cn-234 ~ % nvidia-smi", "cn-234"),
    ("[alice@gpu-3 ~]$ dmesg -T | grep Xid", "gpu-3"),
    ("root@node1:~# dmesg -T | grep NVRM", "node1"),
    # (a multi-file grep's `file.log:` before the line and its time stamp)
    ("prefill-2.log:[2025-09-17 15:16:23] prefill-2:311:405 [0] transport/net_ib.cc:199 NCCL WARN NET/IB : port error",
     "prefill-2"),
    # kubectl logs --prefix names the pod; Open MPI's own reports carry `[host:pid]`
    ("[pod/trainer-worker-3/pytorch] RuntimeError: CUDA error: unspecified launch failure", "trainer-worker-3"),
    ("[ichost003:36495] *** Process received signal ***", "ichost003"),
    # syslog's host field is the host by the format, whatever its name, when a program tag follows
    ("Dec 31 01:21:28 FORGE ollama[555324]: cuda driver library failed to get device context 46", "FORGE"),
    ("2024-01-03T04:05:06.123456+00:00 dgx17 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
     "dgx17"),
    # Ray's prefix on a task's or actor's output relayed to the driver
    ("(RayTrainWorker pid=364, ip=10.0.0.218) Setting up process group for: env:// [rank=0, world_size=12]",
     "10.0.0.218"),
    ("(LLMRayActor pid=90738, ip=172.19.24.110) mlx5: host_unknown: got completion with error:", "172.19.24.110"),
    ("(pid=1191773, ip=10.244.4.193) hello there", "10.244.4.193"),
    # nccl-tests' failure reports (src/common.h) name the host whatever its name, behind mpirun's tags
    ("gpu: Test CUDA failure common.cu:1030 'system not yet initialized'", "gpu"),
    (" .. gpu pid 3018: Test failure common.cu:937", "gpu"),
    (" .. pkb-b52c0368-1: Test failure common.cu:839", "pkb-b52c0368-1"),
    ("[1,2]<stdout>:test-nccl-p5-2-worker-0: Test NCCL failure common.cu:961 'unhandled system error'",
     "test-nccl-p5-2-worker-0"),
    # rdma-core's mlx5 provider dumps a bad completion under its host's name
    ("mlx5: SH-IDC1-10-140-24-95: got completion with error:", "SH-IDC1-10-140-24-95"),
    # Cray MPICH's abort report (behind an `srun --label` task id, with `[unknown]` on some versions)
    ("2047: MPICH ERROR [Rank 2047] [job id 57638547.0] [Fri Aug 28 22:45:13 2026] [nid004069] - Abort(1) "
     "(rank 2047 in comm 432): application called MPI_Abort(comm=0xC4000001, 1) - process 2047", "nid004069"),
    ("MPICH ERROR [Rank 1534] [job id 114930.0] [Mon Feb 15 14:58:48 2021] [unknown] [nid001192] - "
     "Abort(672797967) (rank 1534 in comm 0): Fatal error in PMPI_Isend: Other MPI error, error stack:", "nid001192"),
])
def test_a_prefix_that_names_the_host_of_the_line(line, host):
    m = host_match(line)
    assert m is not None and m.group(1) == host
    assert line[m.start(1):m.end(1)] == host  # group 1 is the host's span in the line


@pytest.mark.parametrize("line", [
    "connect to 10.1.2.3:29500 failed: Connection refused",
    "MASTER_ADDR=10.0.0.1 MASTER_PORT=29500",
    "[W socket.cpp:464] [c10d] The server socket has failed to bind to [::]:29500 (10.0.0.1:29500)",
    "NET/IB : Got completion from peer 10.226.98.98<48598> with error 12, opcode 0, len 0, vendor err 129",
    "(RayTrainWorker pid=17770) Setting up process group for: env:// [rank=0, world_size=16]",  # the driver's node
    "worker (pid=42, ip=10.0.0.5) exited",  # not the prefix
    "10.0.0.15:29500: connection timed out",  # an address with its port, not a prefix
    "0: RuntimeError: CUDA error: an illegal memory access was encountered",  # srun --label task id
    "12: [rank12]: torch.distributed.DistBackendError: NCCL error",
    "1.2.3: released",
    "2.20.5: NCCL version",
    "300.1.2.3: not an address",
    "Cloning into 'repo'... git@github.com: Permission denied (publickey).",
    "john@example.com wrote 50% of the report",
    "mchorse@172.17.0.2: Permission denied (publickey,password).",
    "MPICH ERROR [Rank 0] - Abort(1): Internal error",
    "Dec 31 01:21:28 the quick brown fox: jumps",  # no program tag after the word
    "[E socket.cpp:435] [c10d] The server socket has failed to listen",  # c10's severity and file
    "[2024-01-01 12:00:00,123] [INFO] step 3",
])
def test_an_address_or_label_that_does_not_name_the_line_host(line):
    assert extract_host(line) is None


def test_a_peer_address_in_an_nccl_line_is_not_its_host():
    line = ("PHLRR4036:24141:24296 [2] ib_plugin.c:978 NCCL WARN NET/IB : Got completion from peer "
            "10.226.98.98<48598> with error 12, opcode 0, len 0, vendor err 129")
    assert extract_host(line) == "PHLRR4036"


def test_a_host_that_starts_with_a_digit_is_read_from_its_first_digit_run():
    """Kept shapes read a host back at a learned shape position: a name from the byte before its
    first digit run (its first letter), an address (no letter) from its first digit run; both
    loops read every line's own host that way."""
    from app.core.keptshapes import field_values

    line = "10.0.0.15: [rank37]: dataloader worker 3 prefetched 12 batches"
    fields = field_ranges(line.encode(), line, rank_match(line), host_match(line))
    assert fields is not None and fields[-1] == 1
    for other, host, rank in (("10.0.0.15: [rank37]: dataloader worker 4 prefetched 99 batches", "10.0.0.15", 37),
                              ("192.168.100.7: [rank5]: dataloader worker 0 prefetched 1 batches", "192.168.100.7", 5),
                              ("1.2.3.4: [rank123]: dataloader worker 7 prefetched 0 batches", "1.2.3.4", 123)):
        assert field_values(other.encode(), fields) == (rank, host)
    named = "node-04: [rank37]: dataloader worker 3 prefetched 12 batches"
    fields = field_ranges(named.encode(), named, rank_match(named), host_match(named))
    assert fields[-1] == 0
    assert field_values(b"node-117: [rank2]: dataloader worker 3 prefetched 12 batches", fields) == (2, "node-117")


def test_rank_and_host_of_an_mpich_abort_and_the_host_of_a_prompt():
    assert failed_rank_report("MPICH ERROR [Rank 5] [job id 40341.0] [Tue Dec 12 17:52:24 2023] [nid001097] - "
                       "Abort(404347151) (rank 5 in comm 0): Fatal error in PMPI_Send") == (5, "nid001097")
    assert failed_rank_report("MPICH ERROR [Rank 0] - Abort(1): Internal error") is None
    assert prompt_host("[alice@gpu-3 ~]$ nvidia-smi") == "gpu-3"
    assert prompt_host("alice@gpu-3 wrote: see the log") is None
    assert prompt_host("10.0.0.15: root@node1:~# ls") is None  # behind a pdsh prefix: the prefix names it


def test_rank_match_skips_only_patterns_that_cannot_match():
    """rank_match tries the tagged patterns only on lines with `rank`/`default` in them: on every
    line of the real logs and rule examples it finds what trying every pattern in order finds."""
    from pathlib import Path

    from app.core.fields import _RANK_RES
    from app.core.rules import load_rules

    def every_pattern(text):
        return next((m for m in (rx.search(text) for rx in _RANK_RES) if m), None)

    ruleset = load_rules()
    lines = [e for r in [*ruleset.diagnosis, *ruleset.filters] for e in [*r.spec.examples.match, *r.spec.examples.no_match]]
    real = Path(__file__).resolve().parents[2] / "tests" / "golden" / "corpus"
    for path in sorted(real.rglob("log.txt")):
        lines += path.read_text(errors="replace").splitlines()[:400]
    lines += ["[rank7]: x", "[RANK 3] y", "global_rank=12 z", "[default3]: w", "0: srun label", "node-3: 12: tail"]
    found = 0
    for line in lines:
        want, got = every_pattern(line), rank_match(line)
        assert (want and (want.span(), want.group(1))) == (got and (got.span(), got.group(1))), line
        found += want is not None
    assert found > 100


# host_match skips a pattern when a literal it needs is absent; its answer must stay that of
# trying every pattern in order
_HOST_PARTS = ["Jul 14 03:12:55 ", "node-12", "10.0.0.15", ": ", " ", "pdsh@launcher: ",
               "(RayTrainWorker pid=364, ip=10.0.0.218) ", "root@node1:~# ", "MPICH ERROR [Rank 5] [job id 40341.0] "
               "[Tue Dec 12 17:52:24 2023] [nid001097] ", "host=", "hostname:", "node ", "[rank3]:",
               "[1,4]<stdout>:", ":1234:5678 [3] NCCL INFO", "x", "Error", "A", "é", "@", "("]


def _host_match_every_pattern(text):
    return next((m for rx in fields._HOST_RES if fields._a_host(m := rx.search(text))), None)


def test_the_patterns_host_match_gates_are_the_last_three():
    assert fields._HOST_RES[-3:] == [fields._PROMPT_RE, fields._MPICH_HOST_RE, fields._NAMED_HOST_RE]
    assert fields._HOST_ANCHORED == fields._HOST_RES[:-3]


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(_HOST_PARTS), max_size=8).map("".join))
@example("Jul 14 03:12:55 node-12 kernel: NVRM: Xid 79")
@example("Aug  3 03:12:55 node-12 kernel: NVRM: Xid 79")
@example("pdsh@launcher: 10.0.0.15: ssh exited with exit code 1")
@example("(RayTrainWorker pid=364, ip=10.0.0.218) RuntimeError: boom")
@example("")
def test_host_match_answers_like_every_pattern_in_order(text):
    got, want = host_match(text), _host_match_every_pattern(text)
    assert (got and (got.re.pattern, got.span(1))) == (want and (want.re.pattern, want.span(1)))


@pytest.mark.parametrize("line, host", [
    # a log line quoted in an issue thread keeps its host behind the quote mark
    ("> node-3:106:196 [0] transport/net_ib.cc:73 NCCL WARN NET/IB : Got async event : GID table change", "node-3"),
    ("> [2025-10-13 10:12:54] iv-ydin754tmox:1458548:1480527 [0] misc/ibvwrap.cc:182 NCCL WARN Call to ibv_reg_mr "
     "failed", "iv-ydin754tmox"),
    ("> 10.0.0.15: [rank37]: RuntimeError: CUDA error: an illegal memory access was encountered", "10.0.0.15"),
    # behind a terminal UI's box-drawing border, or markdown's inline-code backtick
    ("\u2502 task-7701-z5h6w:73:91 [1] NCCL INFO comm 0x7f53 rank 3 nranks 8 cudaDev 1 - Init COMPLETE",
     "task-7701-z5h6w"),
    ("`ubuntu20-server-2:94639:94647 [0] transport/net_ib.cc:100 NCCL WARN NET/IB : mlx5_0:1 Got async event",
     "ubuntu20-server-2"),
    # or indented, as a markdown code block quotes it
    ("    gpu46:78367:78492 [0] transport/nvls.cc:244 NCCL WARN Cuda failure 1 'invalid argument'", "gpu46"),
    ("\tnode-3:106:196 [0] NCCL INFO Channel 00/02 :    0   1", "node-3"),
])
def test_a_quoted_line_keeps_its_host(line: str, host: str) -> None:
    assert host_match(line).group(1) == host


@pytest.mark.parametrize("line", ["> note: retrying", ">>> import torch", "> Traceback (most recent call last):"])
def test_a_quoted_line_without_a_host_names_none(line: str) -> None:
    assert host_match(line) is None
