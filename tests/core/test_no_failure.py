"""Runs the log does not show failing are reported as "no failure found", not as a hang.

A finished run (a trainer's completion marker) or start-up output without an error: type
Unknown, action investigate, low confidence. A hang needs training progress that stops without
a completion marker, and a stall the log shows (time stamps after the last step covering ten
minutes or more) or a job known to have stopped unfinished; an error before a completion marker
did not stop the run.
"""

from __future__ import annotations

import io

import pytest

from app.core.pipeline import Pipeline


@pytest.fixture(scope="module")
def pipe():
    return Pipeline()


def run(pipe, text: str):
    return pipe.diagnose(io.BytesIO(text.encode())).diagnosis


def hf_steps(n: int) -> list[str]:
    return [f"{{'loss': {2.0 - i / 100:.4f}, 'grad_norm': 0.9, 'learning_rate': 2e-05, 'epoch': {i / 100:.2f}}}"
            for i in range(1, n + 1)]


def no_failure(d) -> bool:
    return (d.root_cause.error_type == "Unknown" and d.action.kind == "investigate"
            and d.root_cause.confidence < 0.4 and d.root_cause.explanation.startswith("no failure found"))


@pytest.mark.parametrize("finish", [
    "{'train_runtime': 1234.5, 'train_samples_per_second': 12.3, 'train_steps_per_second': 0.4, 'train_loss': 1.9, 'epoch': 1.0}",
    "Training completed. Do not forget to share your model on huggingface.co/models =)",
    "`Trainer.fit` stopped: `max_epochs=3` reached.",
    "***** train metrics *****",
])
def test_a_completion_marker_after_training_is_no_failure(pipe, finish):
    lines = ["Loading model", "/usr/lib/python3/torch/utils/checkpoint.py:61: UserWarning: None of the inputs "
             "have requires_grad=True. Gradients will be None"] + hf_steps(30) + [finish, "Saving model to out/"]
    d = run(pipe, "\n".join(lines) + "\n")
    assert no_failure(d), d.root_cause
    assert d.root_cause.evidence[0].text.strip() == finish


def test_the_same_log_without_the_completion_marker_is_a_hang_where_its_time_stamps_show_a_stall(pipe):
    lines = ["Loading model", "***** Running training *****"] + hf_steps(30) + ["***** Running Evaluation *****"]
    # (an excerpt that ends as an eval starts: nothing shows that the eval never ended)
    assert run(pipe, "\n".join(lines) + "\n").root_cause.error_type == "Unknown"
    stamped = lines[:-1] + [f"[2024-05-01 10:{m:02d}:00] heartbeat: eval running" for m in (0, 14, 28)]
    d = run(pipe, "\n".join(stamped) + "\n")
    assert d.root_cause.error_type == "Hang" and d.last_progress.line == 32
    stamped = lines[:-1] + [f"[2024-05-01 10:0{m}:00] heartbeat: eval running" for m in (0, 4, 8)]
    assert run(pipe, "\n".join(stamped) + "\n").root_cause.error_type == "Unknown"  # 8 minutes: no stall yet


def test_an_error_before_the_completion_marker_did_not_stop_the_run(pipe):
    lines = hf_steps(5) + ["wandb: Network error (ReadTimeout), entering retry loop."] + hf_steps(2) + [
        "requests.exceptions.ReadTimeout: HTTPSConnectionPool(host='api.wandb.ai', port=443): Read timed out.",
        "Training completed. Do not forget to share your model on huggingface.co/models =)"]
    d = run(pipe, "\n".join(lines) + "\n")
    assert no_failure(d), d.root_cause
    assert d.co_occurring and {c.role for c in d.co_occurring} == {"recovered"}


def test_an_error_after_the_completion_marker_is_the_failure(pipe):
    lines = hf_steps(5) + ["{'train_runtime': 12.5, 'train_samples_per_second': 1.0, 'epoch': 1.0}",
                           "OSError: [Errno 28] No space left on device"]
    d = run(pipe, "\n".join(lines) + "\n")
    assert d.root_cause.error_type != "Unknown"


def test_a_log_that_ends_on_a_step_is_a_hang_only_for_a_job_that_stopped(pipe):
    """The log alone shows training going on up to its last line (a pasted excerpt of a healthy
    run ends so); a job the scheduler or the live watch saw stop without finishing hung there."""
    from app.core.rank import ends_on_progress, stopped_on_progress

    d = run(pipe, "\n".join(hf_steps(40)) + "\n")
    assert d.root_cause.error_type == "Unknown" and d.action.kind == "investigate"
    assert ends_on_progress(d) and "progressed up to the log's last line" in d.root_cause.explanation
    hung = stopped_on_progress(d, "ended timeout")
    assert hung.root_cause.error_type == "Hang" and hung.root_cause.evidence[0].line == d.last_progress.line
    assert "ended timeout" in hung.root_cause.explanation
    # blank lines after the last step are no output
    assert run(pipe, "\n".join(hf_steps(40)) + "\n\n   \n\n").root_cause.error_type == "Unknown"
    # a phase that began after the last step and never ended reads the same as an excerpt that
    # ends there: the job's end tells them apart
    d = run(pipe, "\n".join(hf_steps(40) + ["Saving model checkpoint to out/checkpoint-40"]) + "\n")
    assert d.root_cause.error_type == "Unknown" and ends_on_progress(d)
    assert "carry no time stamps" in d.root_cause.explanation
    assert stopped_on_progress(d, "ended timeout").root_cause.error_type == "Hang"
    # unless its time stamps show it lasting: then the log itself shows the stall
    d = run(pipe, "\n".join(hf_steps(40) + ["2024-05-01 10:00:00 Saving model checkpoint to out/checkpoint-40",
                                             "2024-05-01 11:30:00 [heartbeat] rank 0 alive"]) + "\n")
    assert d.root_cause.error_type == "Hang" and not ends_on_progress(d)
    assert stopped_on_progress(d, "ended timeout") is d


def test_nan_before_a_completion_marker_is_still_the_failure(pipe):
    lines = hf_steps(5) + ["{'loss': nan, 'grad_norm': nan, 'learning_rate': 2e-05, 'epoch': 0.06}"] * 3 + [
        "Training completed. Do not forget to share your model on huggingface.co/models =)"]
    d = run(pipe, "\n".join(lines) + "\n")
    assert d.root_cause.error_type == "NaNLoss"


# NCCL's proxy service thread losing its local connections, as every process prints it when its
# communicator is destroyed or aborted at exit (two NCCL releases' wordings)
PROXY_TEARDOWN = [
    "node-7:2374:2994 [0] proxy.cc:1497 NCCL WARN [Service thread] Could not receive type from localRank 0, res=3, closed=0",
    "node-7:2374:2994 [0] proxy.cc:1521 NCCL WARN [Proxy Service 0] Failed to execute operation Close from rank 0, retcode 3",
    "node-7:1772561:1773212 [2] NCCL INFO [Service thread] Connection closed by localRank 2",
]


def test_proxy_teardown_lines_alone_are_no_failure(pipe):
    d = run(pipe, "\n".join(hf_steps(20) + ["Saved model to /ckpt/final"] + PROXY_TEARDOWN) + "\n")
    assert no_failure(d)


def test_proxy_lines_after_a_real_error_stay_its_symptoms(pipe):
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)"
    d = run(pipe, "\n".join(hf_steps(20) + [oom] + PROXY_TEARDOWN) + "\n")
    assert d.root_cause.error_type == "OutOfMemoryError"
    assert {c.role for c in d.co_occurring if c.error_type == "NCCLRemoteError"} == {"symptom"}


def test_an_error_that_came_back_between_steps_is_not_the_failure(pipe):
    # the same error printed again and again while the steps went on: the job lived through each
    # one, also the last, where the post was cut
    lines = []
    for step in (44, 60, 83, 101):
        lines.append(f"Epoch 0:   1%|| {step}/4943 [00:11<21:31,  3.79it/s, loss=7.11]")
        lines.append("wandb: ERROR Error while calling W&B API: internal database error (<Response [500]>)")
    assert no_failure(run(pipe, "\n".join(lines)))


def test_an_error_that_repeats_only_after_the_steps_stopped_is_the_failure(pipe):
    lines = [f"Epoch 0:   1%|| {step}/4943 [00:11<21:31,  3.79it/s, loss=7.11]" for step in (44, 60, 83)]
    lines += ["wandb: ERROR Error while calling W&B API: internal database error (<Response [500]>)"] * 3
    assert not no_failure(run(pipe, "\n".join(lines)))
