"""An isolate action names the host(s) to drain: from the log's NCCL init lines, from the
registered job's placement, or it does not say isolate."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

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


def test_no_host_anywhere_means_the_probe_must_find_it(pipeline):
    """A hardware fault with no nameable host is still an isolate (restarting on the same nodes
    fails again), with no suspect host: its reason sends the controller to probe the job's nodes
    and drain only a node that fails the probe, never a guess."""
    log = [f"iteration {i}/ 100 | lm loss: 2.0E+00 |" for i in range(5)] + [ECC.format(r=9)]
    for job in (None, JobPlacement(hosts=("a", "b", "c"), gpu_count=16), JobPlacement()):
        d = pipeline.diagnose(_log(*log), job=job).diagnosis
        assert d.root_cause.error_type.value == "ECCError"
        assert (d.action.kind, d.action.suspect_hosts, d.action.suspect_ranks) == (
            ActionKind.ISOLATE_AND_RESTART, [], [9])
        assert "No host can be named" in d.action.reason and "probe the job's nodes" in d.action.reason


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


def test_torchrun_failure_summary_maps_its_rank_to_its_host(pipeline):
    log = [f"iteration {i}/ 100 | lm loss: 2.0E+00 |" for i in range(5)] + [
        ECC.format(r=5),
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2024-05-07_03:22:41",
        "  host      : gpu-h100-017",
        "  rank      : 5 (local_rank: 5)",
        "  exitcode  : 1 (pid: 18295)",
    ]
    d = pipeline.diagnose(_log(*log)).diagnosis
    assert (d.action.kind, d.action.suspect_hosts) == (ActionKind.ISOLATE_AND_RESTART, ["gpu-h100-017"])
    assert "torchrun's failure summary" in d.action.reason


def test_rank_hosts_read_torchrun_summaries_behind_launcher_prefixes_per_host():
    """pdsh prefixes every line with the node; two nodes' summary boxes interleave line by line,
    and each `rank :` pairs with the `host :` of its own prefix (the kept-line path sees every
    summary line: such shapes are never counted blindly)."""
    hosts = RankHosts()
    for line in ["10.0.0.15:   host      : node-004", "10.0.0.16:   host      : node-005",
                 "10.0.0.16:   rank      : 44 (local_rank: 4)", "10.0.0.15:   rank      : 37 (local_rank: 5)",
                 "10.0.0.17:   rank      : 50 (local_rank: 2)"]:
        assert RankHosts.is_summary_line(line)
        hosts.note_kept_line(line)
    assert hosts.summary == {37: "node-004", 44: "node-005"}
    assert not RankHosts.is_summary_line("10.0.0.15: [rank37]:  File \"train.py\", line 3, in <module>")


MPICH = "MPICH ERROR [Rank {r}] [job id 40341.0] [Tue Dec 12 17:52:24 2023] {unknown}[{host}] - Abort(1) (rank {r} in comm 0)"


def test_mpich_abort_report_maps_its_rank_to_its_host(pipeline):
    log = [f"iteration {i}/ 100 | lm loss: 2.0E+00 |" for i in range(5)] + [
        ECC.format(r=5),
        MPICH.format(r=5, unknown="[unknown] ", host="nid001192"),
        MPICH.format(r=6, unknown="", host="nid001193"),
    ]
    d = pipeline.diagnose(_log(*log)).diagnosis
    assert (d.action.kind, d.action.suspect_ranks, d.action.suspect_hosts) == (
        ActionKind.ISOLATE_AND_RESTART, [5], ["nid001192"])
    assert "MPICH's abort report" in d.action.reason


NO_RANK_ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered"


@pytest.mark.parametrize(("lines", "host"), [
    # the command's output follows its prompt: that shell runs on the faulty node
    (["(venv) root@node1:~/kubespray# nvidia-smi", NO_RANK_ECC], "node1"),
    # a login node's prompt first, then the compute node's: the last prompt before the failure
    (["wangcui@aha:~$ sinfo", "normal up mix 5-00:00:00 gpu:8 hoth", "wangcui@hoth:~/work$ python train.py",
      NO_RANK_ECC, "wangcui@aha:~$ exit"], "hoth"),
    (["zeyer@cn-234 ~ % nvidia-smi", "zeyer@cn-234 ~ % python train.py", NO_RANK_ECC], "cn-234"),
    # prompts of two hosts folded into one template: which one ran last before the failure is unseen
    ([f"root@node{h}:~# nvidia-smi" for h in (1, 2, 1)] + [NO_RANK_ECC, "root@node2:~# nvidia-smi"], None),
    # ... but the last line of such a template is kept: seen before the failure, it names the host
    ([f"root@node{h}:~# nvidia-smi" for h in (1, 2, 1, 2)] + [NO_RANK_ECC], "node2"),
    # no prompt before the failure, but the log's only host is node1 (its lines are one host's output)
    ([NO_RANK_ECC, "root@node1:~# exit"], "node1"),
    # no prompt before the failure and two hosts in the log: none is named
    ([NO_RANK_ECC, "root@node1:~# exit", "root@node2:~# exit"], None),
])
def test_a_failure_printed_in_a_shell_session_names_the_prompt_host(pipeline, lines, host):
    d = pipeline.diagnose(_log(*lines)).diagnosis
    assert d.action.kind is ActionKind.ISOLATE_AND_RESTART
    assert d.action.suspect_hosts == ([host] if host else [])
    if host:
        assert "shell session" in d.action.reason or "the only host" in d.action.reason


@pytest.mark.parametrize(("error", "host"), [
    # a GPU fault the policy investigates (CUDA's unknown error before any training): the engineer
    # looks at the host whose shell printed it first
    ("RuntimeError: CUDA error: unknown error", "cn-234"),
    # the job's own error: no host to look at
    ("ValueError: could not broadcast input array from shape (3,) into shape (4,)", None),
])
def test_an_infrastructure_fault_that_does_not_isolate_still_names_its_shell_host(error, host):
    d = Pipeline().diagnose(_log("zeyer@cn-234 ~ % python train.py", error)).diagnosis
    assert d.action.kind is not ActionKind.ISOLATE_AND_RESTART
    assert d.action.suspect_hosts == ([host] if host else [])
    if host:
        assert "shell session" in d.action.reason


def test_a_gpu_fault_in_one_hosts_log_names_that_host(pipeline):
    """NCCL's INFO lines name one host and the failure names no rank: the log is that host's
    output, and a fault of its own GPU is there."""
    lines = ["VM-0-14:162637:162637 [6] NCCL INFO Bootstrap : Using eth0:172.17.0.14<0>",
             "VM-0-14:162635:162635 [4] NCCL INFO cudaDriverVersion 12020", NO_RANK_ECC]
    d = pipeline.diagnose(_log(*lines)).diagnosis
    assert (d.action.kind, d.action.suspect_hosts) == (ActionKind.ISOLATE_AND_RESTART, ["VM-0-14"])
    assert "the only host" in d.action.reason


def test_lines_with_in_c_finds_the_lines_bytes_find_finds():
    """RankHosts.scan looks for NCCL init lines with the C loop's memmem (no GIL): the same
    (start, end) spans as the bytes.find walk, each line once, cut at `length`, at most `cap`."""
    import random

    from app.core.placement import _MARK, _lines_with

    lines_with = pytest.importorskip("app.core._shapescan").lines_with
    rng = random.Random(3)
    pieces = [b" nranks ", b"nranks", b"\n", b"x", b" ", b"rank 3 nranks 8 ", b"\r"]
    for _ in range(500):
        buf = b"".join(rng.choice(pieces) for _ in range(rng.randrange(0, 30)))
        length = rng.randrange(0, len(buf) + 1)
        want = list(_lines_with(buf, _MARK, length))
        assert lines_with(buf, _MARK, length, 1000) == want, (buf, length)
        assert lines_with(bytearray(buf), _MARK, length, 2) == want[:2]
    many = b"".join(b"node-%d:1:2 [0] NCCL INFO rank %d nranks 512 x\n" % (r // 8, r) for r in range(512))
    assert lines_with(many, _MARK, len(many), 10_000) == list(_lines_with(many, _MARK, len(many)))


# the summary-line hint skips its search on printable ASCII without ` :`; the answer must stay
# that of the search alone, for every kind of whitespace `\s` matches
_HINT_PARTS = ["host", "rank", " ", "\t", ":", "a", "0", "\u00a0", "\x0b", "\x1c", "\u3000", "é", "[rank3]"]


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.sampled_from(_HINT_PARTS), max_size=12).map("".join))
@example("10.0.0.7: [rank53]: warning")
@example("[default0]:    host      : node-3")
@example("  rank\t: 3")
@example("rank\u00a0: 3")
def test_summary_hint_answers_like_its_search(text):
    want = ("host" in text or "rank" in text) and placement_mod._SUMMARY_HINT.search(text) is not None
    assert placement_mod._summary_hint(text) is want


def test_a_node_loss_in_one_hosts_log_does_not_name_the_survivor():
    """A lost node is reported by the hosts that survive it: the only printing host of such a log
    is the survivor, never the suspect."""
    lines = ["node-a:162637:162637 [0] NCCL INFO NET/Plugin : dlerror=libnccl-net.so: cannot open shared object "
             "file: No such file or directory No plugin found (libnccl-net.so), using internal implementation",
             "JobId=4242 JobName=train UserId=alice(1001) JobState=NODE_FAIL Reason=NodeDown Dependency=(null)"]
    d = Pipeline().diagnose(_log(*lines)).diagnosis  # the shipped rules (Slurm's NODE_FAIL)
    assert d.root_cause.error_type.value == "NodeFailure"
    assert "node-a" not in d.action.suspect_hosts


@pytest.mark.parametrize("allocation, host", [
    ("Exec host:  gpu-2-17/5", "gpu-2-17"),  # PBS/Torque's job record
    ("[2022-05-27T10:42:30.509] sched: Allocate JobId=127441 NodeList=c014 #CPUs=2 Partition=gpu", "c014"),
    ("Task Distribution: gpu-2-17", "gpu-2-17"),  # Moab's checkjob
    ("Exec host:  gpu-2-17/5+gpu-2-18/5", None),  # two hosts: no guess
    ("Task Distribution: gpu-2-17,gpu-2-18", None),
    ("JobId=7 NodeList=gpu[01-02] BatchHost=gpu01", None),
])
def test_a_node_failure_of_a_one_host_job_names_its_host(allocation, host):
    """The scheduler's record in the log says the job ran on one host: a node fault is there."""
    lines = [allocation, "JobId=4242 JobName=train UserId=alice(1001) JobState=NODE_FAIL Reason=NodeDown"]
    d = Pipeline().diagnose(_log(*lines)).diagnosis  # the shipped rules (Slurm's NODE_FAIL)
    assert d.action.kind is ActionKind.ISOLATE_AND_RESTART
    assert d.action.suspect_hosts == ([host] if host else [])


@pytest.mark.parametrize("notice", [
    "2025/04/03 00:21:04 GCP Metadata Service says termination is imminent",
    "Dec  1 02:00:00 systemd-logind[812]: Power key pressed.",
])
def test_a_vms_own_preemption_notice_names_the_vm_that_printed_it(notice):
    """A VM's metadata service tells that VM it is being taken back: in one host's log, the lost
    node is the printing host (the survivor rule above does not apply to a report about itself)."""
    # the notice as the worker wrote it (no host prefix), then the VM's syslog
    lines = [notice,
             "Apr  3 00:21:06 train-vm-7 start-worker[925]: 2025/04/03 00:21:04 PUT /artifacts/model.npz.yml"]
    d = Pipeline().diagnose(_log(*lines)).diagnosis  # the shipped rules (cloud-instance-reclaimed)
    assert d.root_cause.error_type.value == "NodeFailure"
    assert d.action.kind is ActionKind.ISOLATE_AND_RESTART
    assert d.action.suspect_hosts == ["train-vm-7"]


def test_a_preemption_notice_in_a_log_of_several_hosts_names_only_the_vm_that_printed_it():
    lines = ["Apr  3 00:21:03 train-vm-6 start-worker[911]: step 1200 loss 2.113",
             "Apr  3 00:21:04 train-vm-7 start-worker[925]: GCP Metadata Service says termination is imminent"]
    d = Pipeline().diagnose(_log(*lines)).diagnosis
    assert d.root_cause.error_type.value == "NodeFailure"
    assert d.action.suspect_hosts == ["train-vm-7"]


def test_a_gpu_fault_of_a_rank_that_pals_reports_exited_names_that_ranks_host():
    """PALS (HPE Cray's mpiexec) reports each rank that ended with an error on the host it ran on:
    the host of the rank whose GPU faulted, even where the policy only investigates."""
    lines = ["[rank7]: RuntimeError: CUDA error: an illegal memory access was encountered",
             "x4610c4s3b0n0.hsn.cm.aurora.alcf.anl.gov: rank 7 exited with code 1",
             "x4610c4s3b0n1.hsn.cm.aurora.alcf.anl.gov: rank 19 exited with code 1"]
    d = Pipeline().diagnose(_log(*lines)).diagnosis
    assert d.root_cause.error_type.value == "CUDAError"
    assert d.action.suspect_hosts == ["x4610c4s3b0n0.hsn.cm.aurora.alcf.anl.gov"]
    # a rank that exited cleanly is no report of a failure, and an unmapped rank names no host
    lines[1] = "x4610c4s3b0n0.hsn.cm.aurora.alcf.anl.gov: rank 7 exited with code 0"
    assert Pipeline().diagnose(_log(*lines)).diagnosis.action.suspect_hosts == []


@pytest.mark.parametrize(("after", "host"), [
    # the shell came back to its prompt when the command ended (a PS1 showing the exit status)
    (["(axolotl) 134 hotaisle@ENC1-CLS01-SVR14:~/train$ "], "ENC1-CLS01-SVR14"),
    # prompts of two hosts after it: which terminal printed the failure is unseen
    (["root@node1:~# exit", "root@node2:~# exit"], None),
])
def test_a_failure_before_any_prompt_names_the_host_of_the_prompts_after_it(after, host):
    lines = ["HW Exception by GPU node-9 (Agent handle: 0x64ff272d8ab0) reason :GPU Hang",
             "node-7: some other host's line", *after]
    d = Pipeline().diagnose(_log(*lines)).diagnosis
    assert d.root_cause.error_type.value == "CUDAError"
    assert d.action.suspect_hosts == ([host] if host else [])
