"""The spawned process pool survives a worker killed mid-flight (OOM killer, segfault)."""

from __future__ import annotations

import asyncio
import os
import signal

from app.diagnoses.executor import PipelineExecutor
from tests.service.conftest import make_settings, sample_log


def test_killed_pool_worker_is_replaced_and_the_diagnosis_retried(tmp_path, service_pipeline):
    settings = make_settings(tmp_path, diagnosis_executor="process", diagnosis_workers=1)
    executor = PipelineExecutor(settings, service_pipeline)
    log = tmp_path / "job.log"
    log.write_bytes(sample_log())

    async def scenario() -> dict:
        first = await executor.run(log, None)  # starts the worker
        assert first["diagnosis"]["root_cause"]["error_type"] == "ECCError"
        broken = executor._pool  # noqa: SLF001
        for pid in list(broken._processes):  # noqa: SLF001 - simulate the OOM killer
            os.kill(pid, signal.SIGKILL)
        await asyncio.sleep(0.2)
        again = await executor.run(log, None)
        assert executor._pool is not broken  # noqa: SLF001 - a fresh pool took over
        return again

    try:
        result = asyncio.run(scenario())
    finally:
        executor.shutdown()
    assert result["diagnosis"]["root_cause"]["error_type"] == "ECCError"


def test_missing_file_is_an_input_error(tmp_path, service_pipeline):
    executor = PipelineExecutor(make_settings(tmp_path), service_pipeline)
    try:
        out = asyncio.run(executor.run(tmp_path / "gone.log", None))
    finally:
        executor.shutdown()
    assert "missing" in out["input_error"]
