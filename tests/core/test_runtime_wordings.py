"""The same fault in another emitter's words: a SIGBUS as gdb reports it, NCCL's error through
CuPy's binding (Ray's collective library), a CUDA OOM from vLLM's cumem allocator, a
stall as a serving engine's own watchdog (or its executor's step timeout) reports it, a Gloo
collective timeout, a CUDA error in NCCL's NVLS set-up that is no fabric's refusal, device memory
and file descriptors exhausted in other runtimes' words, a Xet download by the cause it wraps."""

from __future__ import annotations

import io

import pytest

from app.core.pipeline import Pipeline
from app.core.types import ActionKind, ErrorType


@pytest.fixture(scope="module")
def pipe():
    return Pipeline()


def _diagnose(pipe, text: str):  # noqa: ANN001
    return pipe.diagnose(io.BytesIO(text.encode())).diagnosis


GDB_SIGBUS = """\
Thread 787 "imagenet_fake_d" received signal SIGBUS, Bus error.
[Switching to Thread 0x7f45d7dff640 (LWP 3925)]
0x00007f6b59544f3b in ncclShmOpen(char*, unsigned long, void**, void**, int, void**) () from /usr/lib/xla_extension.so
(gdb) bt
#0 0x00007f6b59544f3b in ncclShmOpen(char*, unsigned long, void**, void**, int, void**) ()
#1 0x00007f6b595436d7 in ncclProxyService(void*) ()
"""


def test_a_bus_error_gdb_caught_is_shared_memory_not_an_unknown_crash(pipe):
    d = _diagnose(pipe, GDB_SIGBUS)
    assert (d.root_cause.error_type, d.action.kind) == (ErrorType.OSError, ActionKind.NO_RETRY)
    assert d.root_cause.rule_id == "sigbus-shared-memory"
    segv = GDB_SIGBUS.replace("SIGBUS, Bus error", "SIGSEGV, Segmentation fault")
    assert _diagnose(pipe, segv).root_cause.error_type == ErrorType.Unknown


RAY_NCCL = """\
  File "/home/ml/virtualenv/lib/python3.10/site-packages/ray/_private/worker.py", line 2493, in get
    raise value.as_instanceof_cause()
ray.exceptions.RayTaskError(NcclError): ray::Worker.compute() (pid=35381, ip=10.223.22.25, actor_id=b849)
  File "/home/ml/src/allreduce_test.py", line 21, in compute
"""


def test_an_nccl_error_through_cupy_is_the_collective_backend(pipe):
    d = _diagnose(pipe, RAY_NCCL)
    assert (d.root_cause.error_type, d.root_cause.rule_id) == (ErrorType.NetworkError, "exc.exc-cupy-nccl")
    cuda = RAY_NCCL + "cupy_backends.cuda.libs.nccl.NcclError: NCCL_ERROR_UNHANDLED_CUDA_ERROR: unhandled cuda error\n"
    assert _diagnose(pipe, cuda).root_cause.error_type == ErrorType.CUDAError
    # another class in a Ray task error is still that class's
    other = RAY_NCCL.replace("RayTaskError(NcclError)", "RayTaskError(KeyError)")
    assert _diagnose(pipe, other).root_cause.error_type != ErrorType.NetworkError


def test_vllms_cumem_allocator_running_out_is_gpu_memory(pipe):
    text = ("(LLMRayActor pid=226426) ERROR 06-10 10:55:03 [core.py:459]     allocator.wake_up(tags)\n"
            "(LLMRayActor pid=226426) ERROR 06-10 10:55:03 [core.py:459] RuntimeError: CUDA Error: out of memory at "
            "/workspace/csrc/cumem_allocator.cpp:62\n")
    d = _diagnose(pipe, text)
    assert (d.root_cause.error_type, d.action.kind) == (ErrorType.OutOfMemoryError, ActionKind.NO_RETRY)


def test_a_serving_schedulers_own_watchdog_kill_is_a_stall_not_the_oom_killer(pipe):
    # SGLang's scheduler watchdog kills the server after a forward batch stalled; the shell's
    # `Killed` is that kill. Without the watchdog's line, a bare `Killed` stays the OOM killer's.
    lines = [f"[2025-03-09 00:57:15 TP{i}] Watchdog timeout (self.watchdog_timeout=300)" for i in range(8)]
    d = _diagnose(pipe, "\n".join([*lines, "", "Killed"]) + "\n")
    assert (d.root_cause.error_type, d.action.kind) == (ErrorType.Hang, ActionKind.INVESTIGATE)
    assert d.root_cause.rule_id == "sglang-scheduler-watchdog"
    assert _diagnose(pipe, "[2025-03-09 00:50:00 TP0] Decode batch. #running-req: 3\nKilled\n").root_cause.error_type \
        == ErrorType.HostOOMKilled


def test_a_gloo_collective_that_waited_out_its_deadline_is_a_collective_timeout(pipe):
    # Gloo's unbound buffer gave up waiting for a peer's data (NCCL's watchdog timeout, in Gloo's
    # words); a peer that closed its connection is the network symptom it was
    timeout = ("[rank2]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] "
               "Timed out waiting 1800000ms for recv operation to complete\n")
    assert _diagnose(pipe, timeout).root_cause.error_type == ErrorType.NCCLTimeoutError
    closed = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.2]:6323\n"
    assert _diagnose(pipe, closed).root_cause.error_type == ErrorType.NetworkError


def test_a_serving_executor_that_waited_out_its_workers_is_a_stall(pipe):
    # vLLM's executor waited VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS for a worker's step; a worker's
    # own crash report beside it is the cause instead
    lines = ["(EngineCore_DP0 pid=4021) ERROR 09:14:37 [core.py:710] EngineCore encountered a fatal error.",
             "(EngineCore_DP0 pid=4021) TimeoutError: RPC call to sample_tokens timed out."]
    d = _diagnose(pipe, "\n".join(lines) + "\n")
    assert (d.root_cause.error_type, d.action.kind) == (ErrorType.Hang, ActionKind.INVESTIGATE)
    crashed = ["(VllmWorker TP1 pid=4100) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", *lines]
    assert _diagnose(pipe, "\n".join(crashed) + "\n").root_cause.error_type == ErrorType.OutOfMemoryError


@pytest.mark.parametrize(("line", "etype"), [
    # a Gaudi card's memory (the PyTorch bridge's workspace) and MindSpore's device allocator
    ("RuntimeError: FATAL ERROR :: MODULE:SYNHELPER workspace Allocation of size ::14493510400 failed!",
     ErrorType.OutOfMemoryError),
    ("RuntimeError: Malloc for kernel output failed, Memory isn't enough, node:Default/Cast-op446",
     ErrorType.OutOfMemoryError),
    # the DataLoader's process out of file descriptors
    ("RuntimeError: Too many open files. Communication with the workers is no longer possible. Please increase the "
     "limit using `ulimit -n` in the shell", ErrorType.OSError),
])
def test_resource_exhaustion_in_a_runtimes_own_words_is_that_resource(pipe, line, etype):
    d = _diagnose(pipe, line + "\n")
    assert (d.root_cause.error_type, d.action.kind) == (etype, ActionKind.NO_RETRY)


@pytest.mark.parametrize(("line", "etype", "action"), [
    # NCCL's NVLink SHARP set-up: the multicast calls refused (invalid argument) point at the
    # node's NVSwitch fabric; CUDA itself failing to initialise there is the process's CUDA
    ("node2:242431:242479 [5] transport/nvls.cc:158 NCCL WARN Cuda failure 1 'invalid argument'",
     ErrorType.NVLinkError, ActionKind.ISOLATE_AND_RESTART),
    ("node155:3054646:3054695 [1] transport/nvls.cc:246 NCCL WARN Cuda failure 3 'initialization error'",
     ErrorType.CUDAError, ActionKind.NO_RETRY),
    # hf_xet wraps every transfer failure as "CAS service error : <cause>": requests that failed
    # after the client's retries are the service; a full disk is the disk
    ("RuntimeError: Data processing error: CAS service error : ReqwestMiddleware Error: Request failed after 5 retries",
     ErrorType.ConnectionError, ActionKind.RETRY),
    ("RuntimeError: Data processing error: CAS service error : IO Error: No space left on device (os error 28)",
     ErrorType.OSError, ActionKind.NO_RETRY),
])
def test_a_wrapping_message_is_read_by_the_cause_it_names(pipe, line, etype, action):
    d = _diagnose(pipe, line + "\n")
    assert (d.root_cause.error_type, d.action.kind) == (etype, action)
