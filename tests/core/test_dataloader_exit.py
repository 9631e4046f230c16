"""A data-loading worker that died under the main process dies again at the same data and
settings (`no_retry`), in PyTorch's and PaddlePaddle's words; one that exited by itself with an
error code lost its own exception with it, so the cause is still to find (`investigate`)."""

from __future__ import annotations

import io

import pytest

from app.core.pipeline import Pipeline


@pytest.fixture(scope="module")
def pipe():
    return Pipeline()


def _diagnose(pipe, lines: list[str]):  # noqa: ANN001
    return pipe.diagnose(io.BytesIO(("\n".join(lines) + "\n").encode())).diagnosis


TRACE = ["Traceback (most recent call last):", '  File "train.py", line 301, in <module>',
         "    for batch in loader:"]


@pytest.mark.parametrize("line", [
    "RuntimeError: DataLoader worker (pid(s) 8864) exited unexpectedly",
    "RuntimeError: DataLoader 8 workers exit unexpectedly, pids: 245, 246, 247, 248",
    "RuntimeError: (Unavailable) Memory map failed when create shared memory.",
])
def test_a_dead_worker_is_not_restarted(pipe, line):
    d = _diagnose(pipe, [*TRACE, line])
    assert (d.root_cause.error_type, d.action.kind) == ("DataloaderKilled", "no_retry")


def test_a_worker_that_exited_with_an_error_code_is_investigated(pipe):
    d = _diagnose(pipe, [
        *TRACE,
        "RuntimeError: DataLoader worker (pid 109) exited unexpectedly with exit code 1. Details are lost due to "
        "multiprocessing. Rerunning with num_workers=0 may give better error trace.",
        "", "The above exception was the direct cause of the following exception:", "", *TRACE,
        "RuntimeError: DataLoader worker (pid(s) 109) exited unexpectedly"])
    assert (d.root_cause.error_type, d.action.kind) == ("DataloaderKilled", "investigate")


def test_rmm_pool_exhaustion_is_gpu_memory_not_host(pipe):
    d = _diagnose(pipe, ["MemoryError: std::bad_alloc: out_of_memory: RMM failure at:/opt/conda/include/rmm/mr/"
                         "device/pool_memory_resource.hpp:192: Maximum pool size exceeded"])
    assert d.root_cause.error_type == "OutOfMemoryError"
    d = _diagnose(pipe, ["terminate called after throwing an instance of 'std::bad_alloc'", "  what():  std::bad_alloc"])
    assert d.root_cause.error_type == "HostOOMKilled"
