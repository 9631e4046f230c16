"""A launcher that stops the job after one of its processes exited, with nothing that process
printed in the log, reports a process killed without a word: the OOM killer's SIGKILL. When the
process's own error is there, that error is the cause. A managed service's preemption of the
job's nodes is a node loss."""

from __future__ import annotations

import io

import pytest

from app.core.pipeline import Pipeline


@pytest.fixture(scope="module")
def pipe():
    return Pipeline()


def _diagnose(pipe, lines: list[str]):  # noqa: ANN001
    return pipe.diagnose(io.BytesIO(("\n".join(lines) + "\n").encode())).diagnosis


START = ["[2023-04-07 13:08:55,468] [INFO] [utils.py:829:see_memory_usage] Before initializing optimizer states",
         "[2023-04-07 13:08:55,469] [INFO] [utils.py:838:see_memory_usage] CPU Virtual Memory:  used = 28.43 GB, "
         "percent = 22.6%"]
KILLING = "[2023-04-07 13:09:33,201] [INFO] [launch.py:318:sigkill_handler] Killing subprocess 80"


def test_a_deepspeed_child_that_died_silently_was_oom_killed(pipe):
    d = _diagnose(pipe, [*START, KILLING])
    assert (d.root_cause.error_type, d.action.kind) == ("HostOOMKilled", "no_retry")


def test_the_childs_own_error_is_the_cause(pipe):
    d = _diagnose(pipe, [*START, "Traceback (most recent call last):", '  File "train.py", line 88, in <module>',
                         "    model = build(cfg)", "KeyError: 'hidden_size'", KILLING])
    assert (d.root_cause.error_type, d.action.kind) == ("KeyError", "no_retry")


def test_a_managed_service_preempting_the_nodes_is_a_node_loss(pipe):
    d = _diagnose(pipe, ["AzureMLCompute job failed. PreemptionError: Nodes of this job got pre-empted. Check if the "
                         "run has failed or restarted. Reason: Received pre-emption warning signal"])
    assert (d.root_cause.error_type, d.action.kind) == ("NodeFailure", "isolate_and_restart")
