"""A collective timeout at a process group's first collectives (torch's WorkNCCL SeqNum 1-2, or
"last completed NCCL work: -1") means the ranks never connected: investigate, never retry. The
same timeout after thousands of collectives, with training seen before it, stays a retry."""

from __future__ import annotations

import io

import pytest

from app.core.pipeline import Pipeline


def _diagnose(lines: list[str]):
    return Pipeline().diagnose(io.BytesIO(("\n".join(lines) + "\n").encode())).diagnosis


def _old_torch(seq: int) -> list[str]:  # torch 1.x / 2.0 wording
    return [f"[E ProcessGroupNCCL.cpp:457] [Rank {r}] Watchdog caught collective operation timeout: "
            f"WorkNCCL(SeqNum={seq}, OpType=BROADCAST, Timeout(ms)=1800000) ran for 1808940 milliseconds before "
            "timing out." for r in range(4)]


def _new_torch(seq: int, completed: int, numel: int = 4194304, ops: tuple[str, ...] = ("ALLGATHER",),
               timeout_ms: int = 600000) -> list[str]:
    """torch 2.2+ wording, with the watchdog summary; rank r waits in ops[r % len(ops)]."""
    out = []
    for r in range(4):
        out.append(f"[rank{r}]:[E1206 18:44:16.997991020 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught "
                   f"collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={ops[r % len(ops)]}, "
                   f"NumelIn={numel}, NumelOut={numel * 4}, "
                   f"Timeout(ms)={timeout_ms}) ran for {timeout_ms + 3} milliseconds before timing out.")
        out.append(f"[rank{r}]:[E1206 18:44:16.998 ProcessGroupNCCL.cpp:1664] [PG 0 Rank {r}] Exception (either an "
                   f"error or timeout) detected by watchdog at work: {seq}, last enqueued NCCL work: {seq}, "
                   f"last completed NCCL work: {completed}.")
    return out


# training lines a filter rule reads (HF Trainer's dict), before the timeout
_TRAINED = [f"{{'loss': {2.0 - s / 1000:.3f}, 'learning_rate': 1e-05, 'epoch': {s / 100:.2f}}}" for s in range(1, 40)]


@pytest.mark.parametrize("lines", [_old_torch(1), _new_torch(1, -1), _new_torch(2, 0)],
                         ids=["torch1-seq1", "torch2-none-completed", "torch2-seq2"])
def test_first_collective_timeout_investigates(lines: list[str]) -> None:
    d = _diagnose(lines)
    assert d.root_cause.error_type.value == "NCCLTimeoutError"
    assert d.action.kind.value == "investigate"
    assert "first collective" in d.action.reason


@pytest.mark.parametrize("lines", [_old_torch(96120), _new_torch(158000, 157999)], ids=["torch1-late", "torch2-late"])
def test_late_timeout_after_training_still_retries(lines: list[str]) -> None:
    d = _diagnose(_TRAINED + lines)
    assert d.action.kind.value == "retry"


@pytest.mark.parametrize("lines", [_old_torch(96120), _new_torch(158000, 157999)], ids=["torch1-late", "torch2-late"])
def test_late_timeout_with_no_training_seen_investigates(lines: list[str]) -> None:
    """A high SeqNum alone, with no training in the log before it: nothing shows the job ever
    trained (policy `nccl-timeout-no-training-seen`)."""
    d = _diagnose(lines)
    assert (d.root_cause.error_type.value, d.action.kind.value) == ("NCCLTimeoutError", "investigate")
    assert "no training progress before it" in d.action.reason


def test_a_progress_bar_glued_before_the_timeout_is_training_seen() -> None:
    """tqdm's meter with steps done, the timeout's text glued after it on the same line (a bar
    redrawn with a carriage return and no newline): the job trained before the timeout."""
    glued = ("Epoch 0:   6%|##        | 32040/500150 [6:28:43<94:39:17,  1.37it/s, loss=2.6]" + _old_torch(96120)[0])
    assert _diagnose([glued] + _old_torch(96120)[1:]).action.kind.value == "retry"
    bar_only = "Epoch 0:   0%|          | 0/500150 [00:00<?, ?it/s]" + _old_torch(96120)[0]
    assert _diagnose([bar_only] + _old_torch(96120)[1:]).action.kind.value == "investigate"


def test_a_timeout_before_steady_training_investigates() -> None:
    """Within the group's first ten thousand collectives and with no training seen before it, a
    timeout is more often the job's own than a transient fault (policy `nccl-timeout-early`)."""
    d = _diagnose(_new_torch(1580, 1579))
    assert (d.root_cause.error_type.value, d.action.kind.value) == ("NCCLTimeoutError", "investigate")
    assert "first ten thousand collectives" in d.action.reason


def test_a_low_seqnum_after_training_is_a_rarely_used_group_and_retries() -> None:
    """A SeqNum counts one group's collectives: a group used now and then is still low after hours."""
    steps = [f" iteration {i:8d}/  500000 | consumed samples: {512 * i:12d} | elapsed time per iteration (ms): "
             f"1234.5 | learning rate: 1.500E-04 | lm loss: 2.345678E+00 | loss scale: 1.0 | grad norm: 0.8 |"
             for i in range(1000, 1100)]
    d = _diagnose(steps + _new_torch(1580, 1579))
    assert (d.root_cause.error_type.value, d.action.kind.value) == ("NCCLTimeoutError", "retry")


def test_the_proxy_closing_after_a_rank_aborted_does_not_outrank_the_timeout() -> None:
    """`Connection closed by localRank N` is NCCL's service thread seeing rank N's process go down
    (after its watchdog aborted it): the timeout stays the root cause."""
    lines = _new_torch(1, -1)[:2] + [
        "pod-a:211:231 [1] NCCL INFO [Service thread] Connection closed by localRank 1",
        "pod-a:211:224 [0] NCCL INFO comm 0x55763901fad0 rank 1 nranks 2 cudaDev 1 busId 1a000 - Abort COMPLETE"]
    d = _diagnose(lines)
    assert (d.root_cause.error_type.value, d.action.kind.value) == ("NCCLTimeoutError", "investigate")


@pytest.mark.parametrize("name", ["timing", "stall"])
def test_the_new_mechanisms_can_be_switched_off_for_ablation(monkeypatch, name) -> None:
    from app.core import ablation

    steps = [f" iteration {i:8d}/  500000 | consumed samples: {512 * i:12d} | elapsed time per iteration (ms): "
             "1234.5 | learning rate: 1.500E-04 | lm loss: 2.345678E+00 |" for i in range(1, 50)]
    monkeypatch.setenv("LOGDX_ABLATE", name)
    ablation._off.cache_clear()
    try:
        if name == "timing":  # the first collective's timeout is retried as any other
            assert _diagnose(_new_torch(1, -1)).action.kind.value == "retry"
        else:  # a log that ends on a filter rule's step line is a Hang, as before the stall rule
            assert _diagnose(steps).root_cause.error_type.value == "Hang"
    finally:
        monkeypatch.delenv("LOGDX_ABLATE")
        ablation._off.cache_clear()
    assert _diagnose(_new_torch(1, -1)).action.kind.value == "investigate"
    assert _diagnose(steps).root_cause.error_type.value == "Unknown"


def test_a_late_timeout_of_a_one_element_collective_is_the_jobs_own_step() -> None:
    """A collective of one element carries a flag or a metric (a loss average, a stop signal, the
    best-model comparison), not gradients: ranks wait there while others are still saving,
    evaluating or out of data. A restart reaches the same point (policy nccl-timeout-scalar-collective)."""
    d = _diagnose(_new_torch(460000, 459999, numel=1, ops=("ALLREDUCE",)))
    assert (d.root_cause.error_type.value, d.action.kind.value) == ("NCCLTimeoutError", "no_retry")
    assert "single value" in d.action.reason


def test_ranks_waiting_in_different_collectives_are_a_desync() -> None:
    """Some ranks in a BROADCAST, others in an ALLGATHER of the same group: the processes took
    different code paths; investigate, whatever the SeqNum."""
    d = _diagnose(_new_torch(532339, 532338, ops=("BROADCAST", "_ALLGATHER_BASE")))
    assert (d.root_cause.error_type.value, d.action.kind.value) == ("NCCLTimeoutError", "investigate")
    assert "different kinds" in d.action.reason
    # ALLGATHER and _ALLGATHER_BASE are the same collective: no desync, a late timeout retries
    d = _diagnose(_TRAINED + _new_torch(532339, 532338, ops=("ALLGATHER", "_ALLGATHER_BASE")))
    assert d.action.kind.value == "retry"


@pytest.mark.parametrize("collective", ["all_reduce", "barrier"])
def test_an_nccl_error_raised_by_a_collective_call_before_training_is_set_up(collective: str) -> None:
    """torch creates a group's NCCL communicator at its first collective: an NCCL system error
    raised by the Python call itself, with no training before it, is the communicator's creation
    failing (a running collective's failure reaches the watchdog, not the call). Investigate."""
    tb = ["Traceback (most recent call last):",
          '  File "train.py", line 30, in <module>',
          "    main()",
          '  File "train.py", line 22, in main',
          f"    dist.{collective}(t)",
          '  File "/usr/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 2219, '
          f"in {collective}",
          "    work = group.allreduce([tensor], opts)",
          "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
          "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5",
          "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. "]
    d = _diagnose(tb)
    assert (d.root_cause.error_type.value, d.action.kind.value) == ("NCCLRemoteError", "investigate")
    # the same error after training ran is a connection lost mid-run: retry
    steps = [f"{{'loss': 1.{i:02d}, 'grad_norm': 0.9, 'learning_rate': 2e-05, 'epoch': 0.{i:02d}}}" for i in range(20)]
    d = _diagnose(steps + tb)
    assert d.action.kind.value == "retry"


def test_a_deadline_of_a_minute_or_less_is_the_jobs_own_step() -> None:
    """torch's default collective timeout is 30 minutes; a job that set one minute times out
    whenever one rank runs a step of its own for longer (validation on rank 0, a save), on every
    run: no_retry (policy nccl-timeout-short-deadline), whatever the SeqNum."""
    d = _diagnose(_new_torch(4188, 4187, timeout_ms=60000))
    assert (d.root_cause.error_type.value, d.action.kind.value) == ("NCCLTimeoutError", "no_retry")
    assert "a minute or less" in d.action.reason
    # torch 1.x names no SeqNum for a BROADCAST with a custom deadline
    old = ["[E ProcessGroupNCCL.cpp:566] [Rank 2] Watchdog caught collective operation timeout: "
           "WorkNCCL(OpType=BROADCAST, Timeout(ms)=60000) ran for 66854 milliseconds before timing out."]
    assert _diagnose(old).action.kind.value == "no_retry"
    # the default deadline keeps the other policies; the first collectives stay "never connected"
    assert _diagnose(_TRAINED + _new_torch(158000, 157999)).action.kind.value == "retry"
    assert _diagnose(_new_torch(1, -1, timeout_ms=60000)).action.kind.value == "investigate"
