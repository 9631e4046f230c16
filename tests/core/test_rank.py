"""Root-cause ranking and actions on synthetic cascades (mechanics, with a minimal rule set)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from app.core.pipeline import Pipeline
from app.core.rules import load_rules

RULES_MIN = Path(__file__).resolve().parents[1] / "data" / "rules_min"


@pytest.fixture(scope="module")
def pipe():
    return Pipeline(load_rules(RULES_MIN))


def run(pipe, text: str):
    return pipe.diagnose(io.BytesIO(text.encode())).diagnosis


def iters(n: int, start: int = 1, loss: float = 2.0, host: str = "node-01") -> list[str]:
    return [f"{host}: iteration {i:8d}/  500000 | lm loss: {loss:.4E} | loss scale: 65536.0 |"
            for i in range(start, start + n)]


def test_hardware_error_on_one_rank_beats_later_nccl_timeouts(pipe):
    lines = iters(100)
    lines += ["node-05: [rank37]: RuntimeError: CUDA error: uncorrectable ECC error encountered"]
    lines += [f"node-0{r // 8}: [rank{r}]:[E ProcessGroupNCCL.cpp:563] [Rank {r}] Watchdog caught collective "
              "operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE)" for r in range(64) if r != 37]
    lines += ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"]
    d = run(pipe, "\n".join(lines) + "\n")
    assert d.root_cause.error_type == "ECCError"
    assert d.root_cause.evidence[0].line == 101
    assert d.root_cause.evidence[0].rank == 37 and d.root_cause.evidence[0].host == "node-05"
    assert d.action.kind == "isolate_and_restart" and d.action.suspect_hosts == ["node-05"]
    roles = {c.error_type: c.role for c in d.co_occurring}
    assert roles == {"NCCLTimeoutError": "symptom", "ChildFailedError": "symptom"}
    timeout = next(c for c in d.co_occurring if c.error_type == "NCCLTimeoutError")
    assert timeout.count == 63
    assert d.root_cause.confidence >= 0.9


def test_oom_on_one_rank_then_watchdog_timeouts(pipe):
    lines = ["[rank2]: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 336.00 MiB."]
    lines += [f"[rank{r}]:[E ProcessGroupNCCL.cpp:563] [Rank {r}] Watchdog caught collective operation timeout: "
              "WorkNCCL(SeqNum=15734)" for r in (0, 1, 3)]
    d = run(pipe, "\n".join(lines) + "\n")
    assert d.root_cause.error_type == "OutOfMemoryError"
    assert d.action.kind == "no_retry"
    assert [c.role for c in d.co_occurring] == ["symptom"]


def test_remote_process_exited_is_a_symptom_of_the_peer_crash(pipe):
    lines = ["node-02:11:12 [3] NCCL WARN NET/IB : remote process exited or there was a network error",
             "node-07: [rank9]: KeyError: 'optimizer'"]
    d = run(pipe, "\n".join(lines) + "\n")
    assert d.root_cause.error_type == "KeyError"
    assert d.co_occurring[0].error_type == "NCCLRemoteError" and d.co_occurring[0].role == "symptom"


IB_RETRY = "node-03:11:12 [1] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<4242> with error 12, opcode 0"


def test_peer_network_errors_after_a_rank_dies_are_symptoms(pipe):
    d = run(pipe, "\n".join(["node-01: [rank2]: KeyError: 'optimizer'", f"[rank9]: {IB_RETRY}"]) + "\n")
    assert d.root_cause.error_type == "KeyError" and d.action.kind == "no_retry"
    assert [(c.error_type, c.role) for c in d.co_occurring] == [("NetworkError", "symptom")]


def test_a_network_error_long_after_a_handled_exception_is_the_cause(pipe):
    lines = ["node-01: [rank2]: KeyError: 'optimizer'"] + iters(6000) + [f"[rank9]: {IB_RETRY}"]
    d = run(pipe, "\n".join(lines) + "\n")
    assert d.root_cause.error_type == "NetworkError" and d.action.kind == "retry"


def test_chained_traceback_blames_the_first_exception(pipe):
    text = """Traceback (most recent call last):
  File "loader.py", line 3, in load
KeyError: 'weights'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "train.py", line 9, in <module>
ValueError: could not load the model
"""
    d = run(pipe, text)
    assert d.root_cause.error_type == "KeyError"
    assert d.co_occurring[0].error_type == "ValueError" and d.co_occurring[0].role == "wrapper"


def test_launcher_summary_that_hides_a_sigkill(pipe):
    text = "\n".join(iters(20)) + """
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-05-01_10:00:00
  host      : node-03
  rank      : 5 (local_rank: 5)
  exitcode  : -9 (pid: 1234)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 1234
============================================================
"""
    d = run(pipe, text)
    assert d.root_cause.error_type == "HostOOMKilled"
    assert (d.root_cause.evidence[0].host, d.root_cause.evidence[0].rank) == ("node-03", 5)
    assert d.action.kind == "no_retry"


def test_a_launcher_summary_alone_is_an_unknown_cause(pipe):
    text = "\n".join(iters(20)) + "\ntorch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
    d = run(pipe, text)
    assert d.root_cause.error_type == "Unknown" and d.root_cause.confidence < 0.4
    assert d.root_cause.evidence[0].line == 21
    assert [(c.error_type, c.role) for c in d.co_occurring] == [("ChildFailedError", "symptom")]
    assert d.action.kind == "investigate"


def test_an_error_followed_by_more_training_is_recovered(pipe):
    lines = iters(50) + ["Traceback (most recent call last):", "KeyError: 'stale-cache-entry'"] + iters(20, start=51)
    lines += ["[rank3]: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]
    d = run(pipe, "\n".join(lines) + "\n")
    assert d.root_cause.error_type == "OutOfMemoryError"
    assert ("KeyError", "recovered") in [(c.error_type, c.role) for c in d.co_occurring]


def test_only_recovered_errors_then_progress_to_the_end_is_no_failure(pipe):
    lines = iters(50) + ["KeyError: 'stale-cache-entry'"] + iters(20, start=51)
    d = run(pipe, "\n".join(lines) + "\n")
    assert d.root_cause.error_type == "Unknown" and d.last_progress.step == 70
    assert [(c.error_type, c.role) for c in d.co_occurring] == [("KeyError", "recovered")]
    # one progress line after the error (other ranks flushing the same step) is not recovery
    d = run(pipe, "\n".join(iters(50) + ["KeyError: 'x'"] + iters(1, start=51)) + "\n")
    assert d.root_cause.error_type == "KeyError"


def test_an_unexplained_error_line_training_survived_is_not_the_cause(pipe):
    d = run(pipe, "\n".join(iters(10) + ["FATAL: flux capacitor wobble (ignored)"] + iters(10, start=11)) + "\n")
    assert d.root_cause.error_type == "Unknown" and "progressed up to" in d.root_cause.explanation


def test_no_error_and_progress_stops_is_a_hang(pipe):
    # the save after the last step is still running 40 minutes later (its time stamps say so)
    text = "\n".join(iters(300)) + ("\n[2024-05-01 10:00:00] saving checkpoint at iteration 300\n"
                                    "[2024-05-01 10:40:00] node-01: still waiting for rank 12 to save\n")
    d = run(pipe, text)
    assert d.root_cause.error_type == "Hang"
    assert d.last_progress is not None and d.last_progress.step == 300 and d.last_progress.line == 300
    assert d.root_cause.evidence[0].line == 300
    assert d.action.kind == "investigate"


def test_nan_loss_from_the_metric_series(pipe):
    text = "\n".join(iters(200) + iters(3, start=201, loss=float("nan"))) + "\n"
    d = run(pipe, text)
    assert d.root_cause.error_type == "NaNLoss"
    assert d.root_cause.evidence[0].line == 201
    assert d.action.kind == "rollback_and_skip"


def test_loss_spike_mid_run_rolls_back_and_early_spike_investigates(pipe):
    mid = iters(300, loss=2.0) + iters(5, start=301, loss=9.5)
    d = run(pipe, "\n".join(mid) + "\n")
    assert d.root_cause.error_type == "LossSpike"
    assert d.action.kind == "rollback_and_skip"
    early = iters(2, loss=1.13) + iters(1, start=3, loss=11.5)
    d = run(pipe, "\n".join(early) + "\n")
    assert d.root_cause.error_type == "LossSpike"
    assert d.action.kind == "investigate"


def test_a_loss_spike_the_run_recovers_from_is_not_a_failure(pipe):
    lines = iters(100, loss=2.0) + iters(2, start=101, loss=9.0) + iters(50, start=103, loss=2.1)
    d = run(pipe, "\n".join(lines) + "\n")
    assert d.root_cause.error_type == "Unknown"  # no error, progress to the end; the blip is not the cause


def test_collective_timeout_with_a_silent_rank_investigates_that_rank(pipe):
    lines = [f"[E ProcessGroupNCCL.cpp:457] [Rank {r}] Watchdog caught collective operation timeout: "
             "WorkNCCL(SeqNum=1132079)" for r in (3, 2, 1)]
    d = run(pipe, "\n".join(lines) + "\n")
    assert d.root_cause.error_type == "NCCLTimeoutError"
    assert d.action.kind == "investigate" and d.action.suspect_ranks == [0]
    d = run(pipe, lines[0].replace("Rank 3", "Rank 0") + "\n")
    assert d.action.kind == "retry"
    # one node's log (ranks 13 and 14 report it, no other rank prints): not thirteen silent ranks
    node = [line.replace("Rank 3", f"Rank {r}") for r in (13, 14) for line in lines[:1]]
    d = run(pipe, "\n".join(node) + "\n")
    assert d.action.kind == "retry" and d.action.suspect_ranks == []
    # ... but a rank that the log shows printing and that did not report it is silent
    d = run(pipe, "[Rank 4] loading shard 7\n" + "\n".join(node) + "\n")
    assert d.action.kind == "investigate" and d.action.suspect_ranks == [4]


def test_error_words_without_rules_give_unknown_with_low_confidence(pipe):
    d = run(pipe, "starting\nFATAL: the flux capacitor failed\n")
    assert d.root_cause.error_type == "Unknown" and d.root_cause.confidence < 0.4
    assert d.root_cause.evidence[0].line == 2
    assert d.action.kind == "investigate"


def test_output_without_errors_or_progress_is_no_failure(pipe):
    # nothing shows a stall: the explanation names where the log ends, for a job that did stall
    d = run(pipe, "NCCL INFO comm 0x1 rank 0 nranks 8 - Init COMPLETE\nStarting training loop\n")
    assert d.root_cause.error_type == "Unknown" and d.root_cause.evidence[0].line == 2
    assert d.root_cause.explanation.startswith("no failure found") and "start-up" in d.root_cause.explanation
    assert d.root_cause.confidence < 0.4 and d.action.kind == "investigate"


def test_binary_junk_is_not_a_hang(pipe):
    d = pipe.diagnose(io.BytesIO(bytes(range(11, 32)) * 300 + b"\n")).diagnosis
    assert d.root_cause.error_type == "Unknown"


def test_empty_log(pipe):
    d = run(pipe, "")
    assert d.root_cause.error_type == "Unknown" and d.compression.lines_in == 0
