"""Exception structure (app/core/exceptions.py, rules/exceptions.yaml): tracebacks parsed into
typed records with chain links, launcher re-raises and teardown marks, and what that does to a
diagnosis. Each traceback shape is taken in at least two emitters' forms."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.exceptions import (
    FALLBACK, ExceptionTable, check_table_examples, parse_exception_line, parse_tracebacks, strip_prefix, table_of,
)
from app.core.pipeline import Pipeline
from app.core.rules import RuleError, load_rules
from app.core.types import ErrorType, Role

REPO = Path(__file__).resolve().parents[2]


def numbered(text: str) -> list[tuple[int, str]]:
    return list(enumerate(text.strip("\n").splitlines(), 1))


def records(text: str):
    return parse_tracebacks(numbered(text))


def diagnose(pipeline: Pipeline, text: str):
    return pipeline.diagnose(io.BytesIO(text.strip("\n").encode() + b"\n"), workers=1).diagnosis


# ---- prefixes -----------------------------------------------------------------------------------

@pytest.mark.parametrize("line,prefix,body", [
    ("[rank3]: Traceback (most recent call last):", "[rank3]:", "Traceback (most recent call last):"),
    ("[rank3]:   File \"train.py\", line 3, in <module>", "[rank3]:", "  File \"train.py\", line 3, in <module>"),
    ("10.0.0.1: [rank12]: KeyError: 'x'", "10.0.0.1: [rank12]:", "KeyError: 'x'"),
    ("[1,4]<stderr>:ValueError: bad", "[1,4]<stderr>:", "ValueError: bad"),
    ("node-7: RuntimeError: boom", "node-7:", "RuntimeError: boom"),
    ("[default0]:Traceback (most recent call last):", "[default0]:", "Traceback (most recent call last):"),
    ("(RayTrainWorker pid=364, ip=10.0.0.218) KeyError: 'x'", "(RayTrainWorker pid=364, ip=10.0.0.218)", "KeyError: 'x'"),
    ("2024-05-01T10:00:00.123Z [rank1]: OSError: x", "2024-05-01T10:00:00.123Z [rank1]:", "OSError: x"),
    # the markdown a thread wraps a pasted log in: a quote marker, bold or a code span
    ("> Traceback (most recent call last):", ">", "Traceback (most recent call last):"),
    (">   File \"train.py\", line 3, in <module>", ">", "  File \"train.py\", line 3, in <module>"),
    ("**RuntimeError: Connection reset by peer**", "**", "RuntimeError: Connection reset by peer**"),
    ("`ValueError: bad`", "`", "ValueError: bad`"),
    # a qualified class name is not a host label
    ("urllib3.exceptions.MaxRetryError: HTTPSConnectionPool", "", "urllib3.exceptions.MaxRetryError: HTTPSConnectionPool"),
    ("boto3.exceptions.S3UploadFailedError: Failed", "", "boto3.exceptions.S3UploadFailedError: Failed"),
    # a Python logging formatter's time, name and level before each re-logged stderr line
    ("2025-10-31 03:11:02,478 - SimpleTuner - INFO - [rank0]:   File \"t.py\", line 3, in f",
     "2025-10-31 03:11:02,478 - SimpleTuner - INFO - [rank0]:", "  File \"t.py\", line 3, in f"),
    ("2024-05-01 10:00:01,002 - trainer - ERROR - KeyError: 'x'", "2024-05-01 10:00:01,002 - trainer - ERROR -",
     "KeyError: 'x'"),
    # (a dash inside a message is not a logger's segment)
    ("ValueError: a - b - ERROR - c", "", "ValueError: a - b - ERROR - c"),
])
def test_strip_prefix(line: str, prefix: str, body: str) -> None:
    assert strip_prefix(line) == (prefix, body)


# ---- chains -------------------------------------------------------------------------------------

HF_DATASETS_CHAIN = """
Traceback (most recent call last):
  File "/opt/conda/lib/python3.10/site-packages/datasets/builder.py", line 1973, in _prepare_split_single
    for _, table in generator:
  File "pyarrow/error.pxi", line 91, in pyarrow.lib.check_status
pyarrow.lib.ArrowInvalid: JSON parse error: Missing a name for object member. in row 0

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "train.py", line 20, in <module>
    ds = load_dataset("json", data_files="x.json")
  File "/opt/conda/lib/python3.10/site-packages/datasets/builder.py", line 2008, in _prepare_split_single
    raise DatasetGenerationError("An error occurred while generating the dataset") from e
datasets.exceptions.DatasetGenerationError: An error occurred while generating the dataset
"""

HUB_CONTEXT_CHAIN = """
[rank0]: Traceback (most recent call last):
[rank0]:   File "/usr/lib/python3/site-packages/urllib3/connection.py", line 198, in _new_conn
[rank0]:     sock = connection.create_connection(
[rank0]: urllib3.exceptions.NewConnectionError: <urllib3.connection.HTTPSConnection object at 0x7f>: Failed to establish a new connection: [Errno 101] Network is unreachable
[rank0]:
[rank0]: During handling of the above exception, another exception occurred:
[rank0]:
[rank0]: Traceback (most recent call last):
[rank0]:   File "/usr/lib/python3/site-packages/transformers/utils/hub.py", line 402, in cached_file
[rank0]:     resolved_file = hf_hub_download(
[rank0]: OSError: We couldn't connect to 'https://huggingface.co' to load this file.
"""


def test_a_traceback_quoted_in_a_thread_is_one_record(pipeline: Pipeline) -> None:
    quoted = "\n".join(["> Traceback (most recent call last):", '>   File "train.py", line 3, in <module>',
                        ">     store.barrier()", "> RuntimeError: Connection reset by peer"])
    (rec,) = records(quoted)
    assert (rec.name, rec.message, rec.in_traceback, rec.frames) == (
        "RuntimeError", "Connection reset by peer", True, ["train.py:<module>"])
    d = diagnose(pipeline, "**RuntimeError: Connection reset by peer**")
    assert d.root_cause.error_type == "NetworkError"


def test_direct_cause_chain_links_inner_to_outer() -> None:
    inner, outer = records(HF_DATASETS_CHAIN)
    assert (inner.qualname, inner.module, inner.name) == ("pyarrow.lib.ArrowInvalid", "pyarrow.lib", "ArrowInvalid")
    assert inner.wraps_next and inner.chain is None
    assert outer.chain == "cause" and outer.chained_from == 0
    assert outer.name == "DatasetGenerationError" and outer.in_traceback


CUT_AT_RAISE = """
Traceback (most recent call last):
  File "/src/fairseq/fairseq_cli/train.py", line 68, in main
    task = tasks.setup_task(cfg.task)
  File "/src/fairseq/fairseq/tasks/speech_to_text.py", line 58, in setup_task
    raise FileNotFoundError(f"Dict not found: {dict_path}")
"""


def test_a_traceback_cut_after_a_raise_line_is_that_exception(pipeline: Pipeline) -> None:
    (rec,) = records(CUT_AT_RAISE)
    assert (rec.name, rec.message, rec.line, rec.in_traceback) == ("FileNotFoundError", "Dict not found: {dict_path}", 5, True)
    d = diagnose(pipeline, CUT_AT_RAISE)
    assert (d.root_cause.error_type, d.action.kind) == ("FileNotFoundError", "no_retry")
    # the exception line that follows is the record (one, not two); a raise in a middle frame is no exception
    assert [r.line for r in records(CUT_AT_RAISE + "FileNotFoundError: Dict not found: /data/dict.txt\n")] == [6]
    middle = CUT_AT_RAISE.replace('    raise FileNotFoundError(f"Dict not found: {dict_path}")',
                                  '    raise FileNotFoundError(f"Dict not found: {dict_path}")\n'
                                  '  File "/src/x.py", line 3, in f\n    g()')
    assert records(middle) == []


def test_tensorflow_1_exception_lines_outside_a_traceback_are_records(pipeline: Pipeline) -> None:
    # the Coordinator logs the exception that stops training at INFO, class and message
    coord = ("I0722 11:46:47.960094 140585133606656 coordinator.py:224] Error reported to Coordinator: <class "
             "'tensorflow.python.framework.errors_impl.UnknownError'>, /data/imagenet/train-00479-of-01024; "
             "Input/output error")
    (rec,) = records(coord)
    assert (rec.name, rec.module, rec.in_traceback) == ("UnknownError", "tensorflow.python.framework.errors_impl", True)
    assert rec.message.endswith("Input/output error")
    d = diagnose(pipeline, coord + "\n")
    assert (d.root_cause.error_type, d.action.kind) == ("StorageError", "retry")
    # an OpError repeats its class after the op's creation stack
    (rec,) = records("DataLossError (see above for traceback): truncated record at 72435675")
    assert (rec.name, rec.message, rec.in_traceback) == ("DataLossError", "truncated record at 72435675", True)
    d = diagnose(pipeline, "DataLossError (see above for traceback): truncated record at 72435675\n")
    assert (d.root_cause.error_type, d.action.kind) == ("DatasetLoadingError", "no_retry")
    # a bare `Class (aside): text` line is not one
    assert records("Loading (see the docs): shards") == []


def test_context_chain_with_rank_prefixes() -> None:
    inner, outer = records(HUB_CONTEXT_CHAIN)
    assert inner.name == "NewConnectionError" and inner.stream == "[rank0]:"
    assert outer.chain == "context" and outer.name == "OSError" and outer.module == ""


# ---- interleaved ranks --------------------------------------------------------------------------

INTERLEAVED_TORCHRUN = """
[rank1]: Traceback (most recent call last):
[rank0]: Traceback (most recent call last):
[rank1]:   File "train.py", line 40, in <module>
[rank0]:   File "train.py", line 40, in <module>
[rank1]:     loss.backward()
[rank0]:     batch = next(it)
[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.
[rank0]:   File "/opt/conda/lib/python3.10/site-packages/datasets/arrow_dataset.py", line 2800, in __getitem__
[rank0]: KeyError: 'input_ids'
"""

INTERLEAVED_MPIRUN = """
[1,0]<stderr>:Traceback (most recent call last):
[1,1]<stderr>:Traceback (most recent call last):
[1,0]<stderr>:  File "hvd_train.py", line 88, in <module>
[1,1]<stderr>:  File "hvd_train.py", line 91, in <module>
[1,0]<stderr>:    opt.step()
[1,1]<stderr>:    hvd.allreduce(t)
[1,1]<stderr>:horovod.common.exceptions.HorovodInternalError: ncclAllReduce failed: unhandled system error
[1,0]<stderr>:ZeroDivisionError: float division by zero
"""


INTERLEAVED_PDSH = """
10.0.0.1: Traceback (most recent call last):
10.0.0.2: Traceback (most recent call last):
10.0.0.1:   File "/workspace/pretrain_gpt.py", line 158, in <module>
10.0.0.2:   File "/workspace/pretrain_gpt.py", line 158, in <module>
10.0.0.2:     pretrain(train_valid_test_datasets_provider, model_provider)
10.0.0.1:     pretrain(train_valid_test_datasets_provider, model_provider)
10.0.0.2: RuntimeError: CUDA error: an illegal memory access was encountered
10.0.0.1: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, remote process exited or there was a network error
"""


def test_interleaved_tracebacks_stay_apart_by_prefix() -> None:
    recs = {r.stream: r for r in records(INTERLEAVED_PDSH)}
    assert recs["10.0.0.2:"].name == "RuntimeError" and recs["10.0.0.2:"].in_traceback
    assert recs["10.0.0.1:"].qualname == "torch.distributed.DistBackendError"
    recs = {r.stream: r for r in records(INTERLEAVED_TORCHRUN)}
    assert recs["[rank1]:"].name == "OutOfMemoryError" and recs["[rank1]:"].frames == ["train.py:<module>"]
    assert recs["[rank0]:"].name == "KeyError" and len(recs["[rank0]:"].frames) == 2
    recs = {r.stream: r for r in records(INTERLEAVED_MPIRUN)}
    assert recs["[1,1]<stderr>:"].name == "HorovodInternalError" and recs["[1,1]<stderr>:"].in_traceback
    assert recs["[1,0]<stderr>:"].name == "ZeroDivisionError" and recs["[1,0]<stderr>:"].in_traceback


# ---- launcher re-raises -------------------------------------------------------------------------

ACCELERATE_RERAISE = """
Traceback (most recent call last):
  File "/opt/conda/bin/accelerate", line 8, in <module>
    sys.exit(main())
  File "/opt/conda/lib/python3.10/site-packages/accelerate/commands/accelerate_cli.py", line 48, in main
    args.func(args)
  File "/opt/conda/lib/python3.10/site-packages/accelerate/commands/launch.py", line 1097, in launch_command
    simple_launcher(args)
  File "/opt/conda/lib/python3.10/site-packages/accelerate/commands/launch.py", line 703, in simple_launcher
    raise subprocess.CalledProcessError(returncode=process.returncode, cmd=cmd)
subprocess.CalledProcessError: Command '['/opt/conda/bin/python3', 'finetune.py', '--bf16']' returned non-zero exit status 1.
"""

TORCHRUN_RERAISE = """
Traceback (most recent call last):
  File "/usr/local/bin/torchrun", line 8, in <module>
    sys.exit(main())
  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 346, in wrapper
    return f(*args, **kwargs)
  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/run.py", line 806, in main
    run(args)
  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/launcher/api.py", line 264, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
"""

BUILD_STEP_CALLEDPROCESS = """
Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/torch/utils/cpp_extension.py", line 2100, in _run_ninja_build
    subprocess.run(
  File "/usr/lib/python3.10/subprocess.py", line 526, in run
    raise CalledProcessError(retcode, process.args,
subprocess.CalledProcessError: Command '['ninja', '-v']' returned non-zero exit status 1.
"""


def test_launcher_reraises_are_marked() -> None:
    (acc,) = records(ACCELERATE_RERAISE)
    (trun,) = records(TORCHRUN_RERAISE)
    (build,) = records(BUILD_STEP_CALLEDPROCESS)
    assert acc.launcher and trun.launcher
    assert not build.launcher  # a build step's failed command is the failure itself


def test_launcher_reraise_is_not_the_root_cause(pipeline: Pipeline) -> None:
    d = diagnose(pipeline, "step 1 loss 2.0\n" + INTERLEAVED_TORCHRUN.replace("[rank0]", "[rankX]") + ACCELERATE_RERAISE)
    assert d.root_cause.error_type is ErrorType.OutOfMemoryError
    # alone, the re-raise says only that a worker failed: no type is invented for it
    d = diagnose(pipeline, ACCELERATE_RERAISE)
    assert d.root_cause.error_type is ErrorType.Unknown
    d = diagnose(pipeline, BUILD_STEP_CALLEDPROCESS)
    assert d.root_cause.error_type is ErrorType.CalledProcessError


# ---- teardown -----------------------------------------------------------------------------------

DATALOADER_DEL = """
Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f1c2c3e0ee0>
Traceback (most recent call last):
  File "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py", line 1479, in __del__
    self._shutdown_workers()
  File "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py", line 1443, in _shutdown_workers
    w.join(timeout=_utils.MP_STATUS_CHECK_INTERVAL)
AttributeError: 'NoneType' object has no attribute 'join'
"""

ATEXIT_WANDB = """
Error in atexit._run_exitfuncs:
Traceback (most recent call last):
  File "/opt/conda/lib/python3.10/site-packages/wandb/sdk/wandb_run.py", line 2300, in _atexit_cleanup
    self._on_finish()
  File "/opt/conda/lib/python3.10/site-packages/wandb/sdk/interface/router_sock.py", line 27, in _read_message
    resp = self._sock_client.read_server_response(timeout=1)
ConnectionResetError: [Errno 104] Connection reset by peer
"""

SHUTDOWN_THREAD = """
[rank2]: Traceback (most recent call last):
[rank2]:   File "/usr/lib/python3.10/threading.py", line 1016, in _bootstrap_inner
[rank2]:     self.run()
[rank2]:   File "/opt/conda/lib/python3.10/site-packages/torch/utils/data/_utils/pin_memory.py", line 49, in do_one_step
[rank2]: ImportError: sys.meta_path is None, Python is likely shutting down
"""

DEL_FRAME_ONLY = """
Traceback (most recent call last):
  File "/opt/conda/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line 3601, in __del__
    self.destroy()
RuntimeError: Cannot re-initialize CUDA in forked subprocess.
"""


# a path the poster redacted, its opening quote lost with it
DEL_REDACTED_PATH = """
Traceback (most recent call last):
  File <path_to_webdataset_package>/gopen.py", line 121, in __del__
    self.close()
  File "<path_to_webdataset_package>gopen.py", line 109, in close
    self.wait_for_child()
OSError: (('aws s3 cp <s3_url> -',), {'shell': True, 'bufsize': 8192}): exit 1 (read) {}
"""


RAY_ACTOR_EXIT = """
(pid=13200) Traceback (most recent call last):
(pid=13200)   File "/home/user/.local/lib/python3.8/site-packages/ray/actor.py", line 1001, in __ray_terminate__
(pid=13200)     ray.actor.exit_actor()
(pid=13200)   File "/home/user/.local/lib/python3.8/site-packages/ray/actor.py", line 1077, in exit_actor
(pid=13200)     raise exit
(pid=13200) SystemExit: 0
"""


# multiprocessing's finalizer removing a worker's temp dir as the worker exits
PYMP_FINALIZER = """
Traceback (most recent call last):
  File "/usr/lib/python3.10/multiprocessing/util.py", line 300, in _run_finalizers
    finalizer()
  File "/usr/lib/python3.10/multiprocessing/util.py", line 224, in __call__
    res = self._callback(*self._args, **self._kwargs)
  File "/usr/lib/python3.10/multiprocessing/util.py", line 133, in _remove_temp_dir
    rmtree(tempdir)
  File "/usr/lib/python3.10/shutil.py", line 729, in rmtree
    os.rmdir(path)
OSError: [Errno 39] Directory not empty: '/tmp/pymp-7a7ja_j_'
"""


@pytest.mark.parametrize("text,why", [
    (DATALOADER_DEL, "__del__"), (ATEXIT_WANDB, "atexit"), (SHUTDOWN_THREAD, "shutdown"), (DEL_FRAME_ONLY, "__del__"),
    (RAY_ACTOR_EXIT, "exit status 0"), (PYMP_FINALIZER, "_run_finalizers"), (DEL_REDACTED_PATH, "__del__"),
])
def test_teardown_exceptions_are_marked(text: str, why: str) -> None:
    (rec,) = records(text)
    assert rec.teardown == why


# a program that re-logs its children's stderr line by line through a logging formatter
RELOGGED_TRACEBACK = """
2024-05-01 10:00:00,001 - trainer - INFO - step 10 loss 2.31
2024-05-01 10:00:01,002 - trainer - ERROR - Traceback (most recent call last):
2024-05-01 10:00:01,002 - trainer - ERROR -   File "/app/train.py", line 88, in <module>
2024-05-01 10:00:01,002 - trainer - ERROR -     main()
2024-05-01 10:00:01,002 - trainer - ERROR -   File "/usr/lib/python3.10/site-packages/botocore/client.py", line 960, in _make_api_call
2024-05-01 10:00:01,002 - trainer - ERROR -     raise error_class(parsed_response, operation_name)
2024-05-01 10:00:01,002 - trainer - ERROR - botocore.exceptions.ClientError: An error occurred (SlowDown) when calling the PutObject operation
"""


def test_a_traceback_relogged_through_a_logging_formatter_is_parsed() -> None:
    (rec,) = records(RELOGGED_TRACEBACK)
    assert rec.in_traceback and rec.start == 2 and rec.line == 7
    assert rec.qualname == "botocore.exceptions.ClientError"
    assert [f.rsplit(":", 1)[1] for f in rec.frames] == ["<module>", "_make_api_call"]


# two DataLoader workers' ignored `__del__` tracebacks printed at once: the second lost its
# notice and header to the first, its frames and exception line come after the first's
INTERLEAVED_IGNORED = """
Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f4faf115ca0>
Traceback (most recent call last):
Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f4faf115ca0>
  File "/usr/lib/python3.8/site-packages/torch/utils/data/dataloader.py", line 1324, in __del__
Traceback (most recent call last):
  File "/usr/lib/python3.8/site-packages/torch/utils/data/dataloader.py", line 1324, in __del__
    self._shutdown_workers()
  File "/usr/lib/python3.8/multiprocessing/process.py", line 160, in is_alive
    assert self._parent_pid == os.getpid(), 'can only test a child process'
AssertionError: can only test a child process
    self._shutdown_workers()
  File "/usr/lib/python3.8/multiprocessing/process.py", line 160, in is_alive
    assert self._parent_pid == os.getpid(), 'can only test a child process'
AssertionError: can only test a child process
"""


def test_an_orphan_copy_of_an_ignored_exception_is_teardown(pipeline: Pipeline) -> None:
    d = diagnose(pipeline, "epoch 1 step 10 loss 0.5\n" + INTERLEAVED_IGNORED)
    assert d.root_cause.error_type is ErrorType.Unknown


def test_a_real_error_with_the_text_of_an_ignored_one_stays_the_failure(pipeline: Pipeline) -> None:
    # (a sticky CUDA error the program raised, then printed again by an ignored `__dealloc__`)
    text = """
cupy_backends.cuda.api.driver.CUDADriverError: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered
Traceback (most recent call last):
  File "cupy/cuda/function.pyx", line 1, in cupy.cuda.function.Module.__dealloc__
  File "cupy_backends/cuda/api/driver.pyx", line 2, in cupy_backends.cuda.api.driver.moduleUnload
cupy_backends.cuda.api.driver.CUDADriverError: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered
Exception ignored in: 'cupy.cuda.function.Module.__dealloc__'
Traceback (most recent call last):
  File "cupy_backends/cuda/api/driver.pyx", line 2, in cupy_backends.cuda.api.driver.moduleUnload
cupy_backends.cuda.api.driver.CUDADriverError: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered
"""
    assert diagnose(pipeline, text).root_cause.error_type is ErrorType.CUDAError


def test_a_non_zero_exit_is_no_teardown() -> None:
    (rec,) = records(RAY_ACTOR_EXIT.replace("SystemExit: 0", "SystemExit: 1"))
    assert rec.teardown is None


def test_repeats_on_other_ranks_take_the_first_ones_structure() -> None:
    # ranks 1..3 print the same teardown traceback; the compressor keeps the first one whole and
    # of the later ones only the final lines (a rule matched them) and the last template lines
    full = numbered(TQDM_DEL_PREFIXED)
    kept = full[:7] + [(n, t.replace("[default1]", f"[default{r}]")) for r, (n, t) in
                       zip((1, 2, 3), [(20, full[13][1]), (30, full[13][1]), (40, full[13][1])])]
    recs = parse_tracebacks(kept)
    assert [r.teardown for r in recs] == ["__del__"] * 4


def test_a_word_colon_line_far_from_an_open_traceback_is_not_its_exception() -> None:
    lines = [(1, "Traceback (most recent call last):"), (2, '  File "x.py", line 1, in <module>'),
             (50, "Loss: 2.31"), (51, "KeyError: 'a'")]
    assert [r.name for r in parse_tracebacks(lines)] == ["KeyError"]


def test_teardown_mark_does_not_leak_to_the_next_traceback() -> None:
    recs = records(DATALOADER_DEL + "\n" + HF_DATASETS_CHAIN)
    assert recs[0].teardown and not any(r.teardown for r in recs[1:])


TRAINING = """
[INFO|trainer.py:1000] 2024-01-01 10:00:00 >> ***** Running training *****
{'loss': 2.1, 'learning_rate': 1e-05, 'epoch': 0.5}
{'loss': 1.9, 'learning_rate': 1e-05, 'epoch': 1.0}
"""
COMPLETED = """
{'train_runtime': 100.0, 'train_samples_per_second': 10.0, 'train_steps_per_second': 1.0, 'train_loss': 2.0, 'epoch': 1.0}
[INFO|trainer.py:2383] 2024-01-01 10:00:00 >> Training completed. Do not forget to share your model on huggingface.co/models =)
"""


LIGHTNING_DONE = """
Epoch 0: 100%|##########| 50/50 [00:10<00:00,  4.90it/s, v_num=0, train_loss=1.20]
`Trainer.fit` stopped: `max_epochs=1` reached.
"""

TQDM_DEL_PREFIXED = """
[default0]:Exception ignored in: <function tqdm.__del__ at 0x7f8e2c1b9a60>
[default0]:Traceback (most recent call last):
[default0]:  File "/opt/conda/lib/python3.10/site-packages/tqdm/std.py", line 1148, in __del__
[default0]:    self.close()
[default0]:  File "/opt/conda/lib/python3.10/site-packages/tqdm/std.py", line 1277, in close
[default0]:    if self.last_print_t < self.start_t + self.delay:
[default0]:AttributeError: 'tqdm' object has no attribute 'last_print_t'
[default1]:Exception ignored in: <function tqdm.__del__ at 0x7f3a2c1b9a60>
[default1]:Traceback (most recent call last):
[default1]:  File "/opt/conda/lib/python3.10/site-packages/tqdm/std.py", line 1148, in __del__
[default1]:    self.close()
[default1]:  File "/opt/conda/lib/python3.10/site-packages/tqdm/std.py", line 1277, in close
[default1]:    if self.last_print_t < self.start_t + self.delay:
[default1]:AttributeError: 'tqdm' object has no attribute 'last_print_t'
"""


@pytest.mark.parametrize("done,noise", [
    (COMPLETED, DATALOADER_DEL), (COMPLETED, ATEXIT_WANDB), (COMPLETED, SHUTDOWN_THREAD),
    (LIGHTNING_DONE, TQDM_DEL_PREFIXED), (LIGHTNING_DONE, DATALOADER_DEL + ATEXIT_WANDB),
])
def test_completed_run_with_teardown_noise_is_no_failure(pipeline: Pipeline, done: str, noise: str) -> None:
    d = diagnose(pipeline, TRAINING + done + noise)
    assert d.root_cause.explanation.startswith("no failure found: training finished normally")
    assert d.root_cause.error_type is ErrorType.Unknown
    assert d.action.kind.value == "investigate"
    assert all(c.role == "recovered" for c in d.co_occurring)


THREAD_AFTER_DONE = """
Exception in thread NetStatThr:
Traceback (most recent call last):
  File "/usr/lib/python3.10/threading.py", line 1016, in _bootstrap_inner
    self.run()
  File "/opt/conda/lib/python3.10/site-packages/wandb/sdk/internal/internal_api.py", line 300, in check_network_status
    status_response = self._interface.communicate_network_status()
requests.exceptions.ConnectionError: ('Connection aborted.', RemoteDisconnected('Remote end closed connection without response'))
"""


def test_background_thread_exception_after_completion_is_harmless(pipeline: Pipeline) -> None:
    (rec,) = records(THREAD_AFTER_DONE)
    assert rec.thread and not rec.teardown
    d = diagnose(pipeline, TRAINING + COMPLETED + THREAD_AFTER_DONE)
    assert d.root_cause.error_type is ErrorType.Unknown


def test_main_thread_exception_after_completion_is_the_failure(pipeline: Pipeline) -> None:
    # the final save or upload failed: the run did not deliver its model
    late = ("Traceback (most recent call last):\n  File \"train.py\", line 90, in <module>\n"
            "    trainer.save_model()\nOSError: [Errno 5] Input/output error\n")
    d = diagnose(pipeline, TRAINING + COMPLETED + late)
    assert d.root_cause.error_type is ErrorType.StorageError
    # a thread's exception before the completion marker is not marked by it
    (rec,) = records(THREAD_AFTER_DONE + "Traceback (most recent call last):\nKeyError: 'x'\n")[1:]
    assert not rec.thread


DRIVER_SHUTDOWN = """
[rank1]:[E ProcessGroupNCCL.cpp:1182] [Rank 1] NCCL watchdog thread terminated with exception: CUDA error: driver shutting down
[rank3]:[E ProcessGroupNCCL.cpp:1182] [Rank 3] NCCL watchdog thread terminated with exception: CUDA error: driver shutting down
"""


def test_an_error_saying_the_process_is_exiting_is_teardown(pipeline: Pipeline) -> None:
    d = diagnose(pipeline, TRAINING + COMPLETED + DRIVER_SHUTDOWN)
    assert d.root_cause.explanation.startswith("no failure found: training finished normally")
    real = "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    d = diagnose(pipeline, TRAINING + real + DRIVER_SHUTDOWN)
    assert d.root_cause.error_type is ErrorType.OutOfMemoryError


@pytest.mark.parametrize("noise", [DATALOADER_DEL, ATEXIT_WANDB, DRIVER_SHUTDOWN])
def test_real_failure_followed_by_teardown_noise_is_the_failure(pipeline: Pipeline, noise: str) -> None:
    real = ("Traceback (most recent call last):\n  File \"train.py\", line 10, in <module>\n    main()\n"
            "KeyError: 'input_ids'\n")
    d = diagnose(pipeline, TRAINING + real + noise)
    assert d.root_cause.error_type is ErrorType.KeyError
    assert any(c.role == "recovered" for c in d.co_occurring)


def test_same_class_real_and_teardown_are_separate_events(pipeline: Pipeline) -> None:
    # an AttributeError at teardown must not lend its lateness (or harmlessness) to a real one
    real = ("Traceback (most recent call last):\n  File \"train.py\", line 10, in <module>\n    main()\n"
            "AttributeError: 'LlamaModel' object has no attribute 'rotary_emb'\n")
    d = diagnose(pipeline, TRAINING + real + DATALOADER_DEL)
    assert d.root_cause.error_type is ErrorType.AttributeError
    assert d.root_cause.evidence[0].text.endswith("rotary_emb'")


HANDLED_RETRY = """
[2024-05-12 11:02:13,551] [WARNING] [train.py:412:save_checkpoint] saving checkpoint global_step500 failed (attempt 1/3), retrying in 30s
Traceback (most recent call last):
  File "/workspace/train.py", line 405, in save_checkpoint
    torch.save(state, path)
OSError: [Errno 5] Input/output error: '/mnt/nfs/ckpt/run7/global_step500/mp_rank_00_model_states.pt'
[2024-05-12 11:02:44,012] [INFO] [train.py:418:save_checkpoint] saved checkpoint global_step500 on attempt 2
"""

HANDLED_SKIP = """
[rank3]: 2024-06-01 08:00:00 WARNING data.py:88 - skipping corrupt sample 1234
[rank3]: Traceback (most recent call last):
[rank3]:   File "/workspace/data.py", line 80, in __getitem__
[rank3]:     img = Image.open(path)
[rank3]: PIL.UnidentifiedImageError: cannot identify image file '/data/img/1234.jpg'
"""


@pytest.mark.parametrize("text", [HANDLED_RETRY, HANDLED_SKIP])
def test_a_traceback_its_logger_says_was_handled(text: str) -> None:
    (rec,) = records(text)
    assert rec.handled
    # an uncaught traceback right after an unrelated line, or after the retry notice of an
    # earlier error, is not
    for before in ("loading shards", "Retrying in 1s [Retry 1/5]."):
        (rec,) = records(before + "\n" + text.strip("\n").split("\n", 1)[1])
        assert not rec.handled


def test_handled_then_real_failure_is_the_real_failure(pipeline: Pipeline) -> None:
    real = ("[rank0]: Traceback (most recent call last):\n[rank0]:   File \"/workspace/train.py\", line 120, in resume\n"
            "[rank0]:     opt.load_state_dict(state['optimizer'])\n[rank0]: KeyError: 'optimizer'\n")
    d = diagnose(pipeline, HANDLED_RETRY + real)
    assert d.root_cause.error_type is ErrorType.KeyError
    assert any(c.role == "recovered" for c in d.co_occurring)


def test_only_error_lines_and_traceback_windows_are_read(pipeline: Pipeline) -> None:
    from app.core.exceptions import MAX_GAP, kept_lines

    chatter = "".join(f"note {i} shard-{i * 7919 % 100003:x} {'abcdefgh'[i % 8] * (i % 5 + 1)} ready\n"
                      for i in range(3000))
    text = TRAINING + chatter + COMPLETED + DATALOADER_DEL + chatter.replace("note", "later")
    log = pipeline.compress(io.BytesIO(text.encode()), workers=1)
    lines, anchors = kept_lines(log)
    assert len(log.templates) > 2000
    # the chatter before the traceback is not read; after its header, a bounded window is
    assert not any(t.startswith("note ") for _, t in lines) and len(lines) <= MAX_GAP + 20
    assert any("in __del__" in t for _, t in lines)  # a frame (not error-looking) inside the window
    assert pipeline.diagnose_compressed(log).diagnosis.root_cause.error_type is ErrorType.Unknown


# ---- typing by the table ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def table() -> ExceptionTable:
    return table_of(load_rules())


@pytest.mark.parametrize("line,etype", [
    ("OSError: [Errno 28] No space left on device", ErrorType.OSError),
    ("OSError: [Errno 5] Input/output error", ErrorType.StorageError),
    ("OSError: [Errno 24] Too many open files", ErrorType.OSError),
    ("torch.cuda.OutOfMemoryError: CUDA out of memory.", ErrorType.OutOfMemoryError),
    ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.", ErrorType.HostOOMKilled),
    ("ray.exceptions.RayTaskError(KeyError): ray::f() (pid=1, ip=10.0.0.2)", ErrorType.KeyError),
    # Ray names the task's class bare: an entry kept to torch's module family still types it
    ("ray.exceptions.RayTaskError(AcceleratorError): ray::Actor.train() (pid=7, ip=10.0.0.2)", ErrorType.CUDAError),
    ("requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443)", ErrorType.ConnectionError),
    ("ConnectionResetError: [Errno 104] Connection reset by peer", ErrorType.ConnectionError),
    ("botocore.exceptions.ClientError: An error occurred (AccessDenied) when calling the GetObject operation",
     ErrorType.S3StorageError),
    ("botocore.exceptions.ClientError: An error occurred (SlowDown) when calling the PutObject operation",
     ErrorType.S3StorageError),
    ("huggingface_hub.utils._errors.GatedRepoError: 401 Client Error.", ErrorType.ModelLoadingError),
    ("safetensors_rust.SafetensorError: Error while deserializing header: HeaderTooLarge", ErrorType.ModelLoadingError),
    ("torch.distributed.DistBackendError: NCCL error in: x.cpp:1, unhandled cuda error", ErrorType.CUDAError),
    # unknown classes of a known family, by their name and module
    ("botocore.exceptions.SomeNewTimeoutError: took too long", ErrorType.ConnectionError),
    ("datasets.exceptions.NewShardError: broken shard", ErrorType.DatasetLoadingError),
])
def test_table_types_classes(table: ExceptionTable, line: str, etype: ErrorType) -> None:
    assert table.lookup_line(line).error_type is etype


@pytest.mark.parametrize("line,etype", [
    ("RuntimeError: Failed to download s3://b/train/index.json. Got errors: [ClientError('An error occurred (SlowDown)')]",
     ErrorType.S3StorageError),
    ("OSError: Consistency check failed (ReadTimeoutError(\"HTTPSConnectionPool(host='cdn-lfs.hf.co', port=443): "
     "Read timed out.\"), '(Request ID: 1)')", ErrorType.ConnectionError),
    ("Exception: upload failed: botocore.exceptions.EndpointConnectionError('Could not connect')", ErrorType.S3StorageError),
])
def test_generic_wrapper_is_typed_by_the_exception_its_message_holds(table: ExceptionTable, line, etype) -> None:
    assert table.lookup_line(line).error_type is etype


def test_specific_class_is_not_retyped_by_its_message(table: ExceptionTable) -> None:
    line = "KeyError: \"ConnectionError('x')\""
    assert table.lookup_line(line).error_type is ErrorType.KeyError
    # a wrapper holding only an unknown class keeps its own type
    assert table.lookup_line("RuntimeError: worker failed: MyLabError('x')").error_type is ErrorType.RuntimeError


def test_unknown_class_of_unknown_package_falls_back(table: ExceptionTable) -> None:
    got = table.lookup_line("mylab.trainer.PlateauStop: no improvement in 5 evals")
    assert got is FALLBACK and got.error_type is ErrorType.Unknown


def test_ray_actor_death_is_a_symptom_unless_node_or_memory(table: ExceptionTable) -> None:
    assert table.lookup_line("ray.exceptions.RayActorError: The actor died unexpectedly.").role is Role.SYMPTOM
    assert table.lookup_line("ray.exceptions.ActorDiedError: The actor died because its node has died. Node Id: 1"
                             ).error_type is ErrorType.NodeFailure


def test_library_class_without_a_rule_is_typed_end_to_end(pipeline: Pipeline) -> None:
    d = diagnose(pipeline, "loading\n" + HF_DATASETS_CHAIN)
    assert d.root_cause.error_type is ErrorType.DatasetLoadingError
    # an exception class no rule matches (no Error suffix), inside a traceback
    text = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n    f()\n"
            "pyarrow.lib.ArrowCapacityError: array cannot contain more than 2147483646 bytes, have 2147483660\n")
    d = diagnose(pipeline, text)
    assert d.root_cause.error_type is ErrorType.DatasetLoadingError


def test_errno_refines_a_generic_rule(pipeline: Pipeline) -> None:
    text = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n    save()\n"
            "OSError: [Errno 116] Stale file handle\n")
    assert diagnose(pipeline, text).root_cause.error_type is ErrorType.StorageError


# ---- the table as data --------------------------------------------------------------------------

def test_table_examples_pass(table: ExceptionTable) -> None:
    assert check_table_examples(table) == []
    assert len(table.specs) >= 60
    names = {c for s in table.specs for c in s.classes}
    for must in ("KeyError", "DistBackendError", "RendezvousTimeoutError", "ArrowInvalid", "GatedRepoError",
                 "NodeDiedError", "SafetensorError", "EndpointConnectionError", "ClientConnectorError",
                 "MaxRetryError", "CheckpointingException", "CalledProcessError", "JSONDecodeError"):
        assert must in names or any(n.endswith("." + must) for n in names), must
    assert all(s.source for s in table.specs)


def _write_rules(tmp_path: Path, body: str) -> Path:
    (tmp_path / "exceptions.yaml").write_text(body)
    return tmp_path


def test_table_schema_rejects_bad_entries(tmp_path: Path) -> None:
    base = ("kind: exceptions\nfamily: exceptions\nrules:\n  - id: x\n    classes: [KeyError]\n"
            "    error_type: {etype}\n    source: s\n{extra}    examples:\n      match: ['KeyError: 1']\n")
    with pytest.raises(RuleError, match="error_type"):
        load_rules(_write_rules(tmp_path, base.format(etype="NotAType", extra="")))
    with pytest.raises(RuleError, match="message"):
        load_rules(_write_rules(tmp_path, base.format(etype="KeyError", extra="    message: '(['\n")))
    with pytest.raises(RuleError, match="source"):
        load_rules(_write_rules(tmp_path, base.format(etype="KeyError", extra="").replace("    source: s\n", "")))
    rs = load_rules(_write_rules(tmp_path, base.format(etype="KeyError", extra="")))
    assert [e.id for e in rs.exceptions] == ["x"]


def test_rules_test_cli_runs_table_examples(tmp_path: Path) -> None:
    body = ("kind: exceptions\nfamily: exceptions\nrules:\n  - id: x\n    classes: [KeyError]\n"
            "    error_type: KeyError\n    source: s\n    examples:\n      match: ['ValueError: 1']\n")
    out = subprocess.run([sys.executable, "-m", "app.cli", "rules", "test", "--rules", str(_write_rules(tmp_path, body))],
                         cwd=REPO, capture_output=True, text=True, env={**os.environ})
    assert out.returncode == 1
    assert "FAIL exceptions: x should match: ValueError: 1" in out.stdout


# ---- ablation -----------------------------------------------------------------------------------

def test_ablation_switch_turns_it_off(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    log.write_text((TRAINING + COMPLETED + DATALOADER_DEL).strip() + "\n")
    code = ("import sys; from app.core.pipeline import Pipeline; "
            "print(Pipeline().diagnose(sys.argv[1], workers=1).diagnosis.root_cause.error_type.value)")
    on = subprocess.run([sys.executable, "-c", code, str(log)], cwd=REPO, capture_output=True, text=True, check=True)
    off = subprocess.run([sys.executable, "-c", code, str(log)], cwd=REPO, capture_output=True, text=True, check=True,
                         env={**os.environ, "LOGDX_ABLATE": "exceptions"})
    assert on.stdout.strip() == "Unknown"
    assert off.stdout.strip() == "AttributeError"  # the teardown noise read as the failure


def _interrupted(frames: list[tuple[str, str]]) -> str:
    lines = ["Traceback (most recent call last):"]
    for path, func in frames:
        lines += [f'  File "{path}", line 10, in {func}', "    pass"]
    return "\n".join(lines + ["KeyboardInterrupt"])


STEPS = "\n".join(f"step {i} loss 2.0" for i in range(1, 6))
WAITING = _interrupted([("train.py", "main"), ("/usr/lib/python3.10/site-packages/torch/utils/data/dataloader.py",
                                                "_next_data"),
                        ("/usr/lib/python3.10/multiprocessing/queues.py", "get"),
                        ("/usr/lib/python3.10/multiprocessing/connection.py", "poll")])


def test_an_interrupt_of_a_waiting_process_is_a_hang(pipeline: Pipeline) -> None:
    """A person stopping a stuck job (Ctrl-C) posts the trace to show where it waits: the last
    frame is a wait (a queue, a lock, a socket, a collective)."""
    d = diagnose(pipeline, f"{STEPS}\n{WAITING}\n")
    assert (d.root_cause.error_type, d.root_cause.rule_id, d.action.kind.value) == (
        ErrorType.Hang, "exc.interrupted-while-waiting", "investigate")
    # a `with lock:` of multiprocessing counts; another context manager's __enter__ does not
    lock = _interrupted([("train.py", "main"), ("/usr/lib/python3.10/multiprocessing/synchronize.py", "__enter__")])
    assert diagnose(pipeline, f"{STEPS}\n{lock}\n").root_cause.error_type is ErrorType.Hang
    other = _interrupted([("train.py", "main"), ("/src/timer.py", "__enter__")])
    assert diagnose(pipeline, f"{STEPS}\n{other}\n").root_cause.error_type is not ErrorType.Hang


def test_an_interrupt_while_computing_or_after_the_end_is_no_hang(pipeline: Pipeline) -> None:
    busy = _interrupted([("train.py", "main"), ("/src/model.py", "forward")])
    assert diagnose(pipeline, f"{STEPS}\n{busy}\n").root_cause.error_type is not ErrorType.Hang
    done = "Training completed. Do not forget to share your model on huggingface.co/models =)"
    assert diagnose(pipeline, f"{STEPS}\n{done}\n{WAITING}\n").root_cause.error_type is not ErrorType.Hang


def test_an_error_before_the_interrupt_stays_the_cause(pipeline: Pipeline) -> None:
    oom = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    d = diagnose(pipeline, f"{STEPS}\n{oom}\n{WAITING}\n")
    assert d.root_cause.error_type is ErrorType.OutOfMemoryError


# ---- a class no entry names, by the built-in its name ends in ------------------------------------

@pytest.mark.parametrize(("final", "want", "action"), [
    ("omegaconf.errors.ConfigKeyError: Key 'lr_scheduler' is not in struct", ErrorType.KeyError, "no_retry"),
    ("omegaconf.errors.ConfigAttributeError: Missing key use_ema", ErrorType.AttributeError, "no_retry"),
    ("mylib.train.MissingDependencyError: flash_attn is required", ErrorType.ImportError, "no_retry"),
    ("pydantic_core._pydantic_core.ValidationError: 1 validation error for TrainingConfig", ErrorType.ValueError,
     "no_retry"),
])
def test_an_unknown_library_class_is_typed_by_its_name(pipeline: Pipeline, final: str, want: ErrorType,
                                                        action: str) -> None:
    text = ("step 10 loss 2.1\nTraceback (most recent call last):\n"
            '  File "/work/train.py", line 88, in <module>\n    main(cfg)\n' + final + "\n")
    d = diagnose(pipeline, text)
    assert (d.root_cause.error_type, d.action.kind) == (want, action)


def test_a_package_family_outranks_a_guess_from_the_class_name() -> None:
    table = table_of(load_rules())
    assert table.lookup_line("datasets.exceptions.MissingKeyError: x").error_type is ErrorType.DatasetLoadingError
    assert table.lookup_line("mylib.MissingKeyError: x").error_type is ErrorType.KeyError
    # a name that says nothing about its base stays a wrapper of an unknown cause
    assert table.lookup_line("mylib.SomethingError: x") is FALLBACK


# ---- the frames say which side failed ---------------------------------------------------------------

_SOCKET_ERROR_UNDER = """\
Traceback (most recent call last):
  File "/opt/conda/lib/python3.10/site-packages/{frame}", line 198, in _new_conn
    sock = connection.create_connection(
  File "/opt/conda/lib/python3.10/site-packages/{frame2}", line 73, in create_connection
    sock.connect(sa)
OSError: [Errno 101] Network is unreachable
"""


@pytest.mark.parametrize("frame, frame2, expected", [
    # raised inside an HTTP client: a request to an external service failed
    ("urllib3/connection.py", "urllib3/util/connection.py", ErrorType.ConnectionError),
    ("httpcore/_sync/connection.py", "httpcore/_backends/sync.py", ErrorType.ConnectionError),
    # an object-store client above the HTTP client: the store's failure (the vocabulary's frame
    # entries, the ones a cut traceback is read by, decide both)
    ("botocore/httpsession.py", "urllib3/util/connection.py", ErrorType.S3StorageError),
    # the same socket error in the job's own collective set-up stays the cluster's network
    ("torch/distributed/rendezvous.py", "torch/distributed/elastic/utils/distributed.py", ErrorType.NetworkError),
])
def test_a_socket_error_in_an_http_client_is_a_connection_error(pipeline: Pipeline, frame, frame2, expected) -> None:
    d = diagnose(pipeline, _SOCKET_ERROR_UNDER.format(frame=frame, frame2=frame2))
    assert d.root_cause.error_type is expected


def test_the_socket_modules_frames_say_nothing_of_who_used_the_network(pipeline: Pipeline) -> None:
    """Every client runs through the standard library's socket module, and so does the job's own
    set-up: its connection to the master that the network refuses stays the cluster's network;
    the same error under an HTTP client's frames is that client's."""
    text = """\
Traceback (most recent call last):
  File "/opt/conda/lib/python3.10/site-packages/{frame}", line 88, in _connect
    sock = socket.create_connection((host, port))
  File "/opt/conda/lib/python3.10/socket.py", line 845, in create_connection
    raise err
  File "/opt/conda/lib/python3.10/socket.py", line 833, in create_connection
    sock.connect(sa)
OSError: [Errno 101] Network is unreachable
"""
    own = diagnose(pipeline, text.format(frame="torch/distributed/elastic/utils/distributed.py"))
    assert own.root_cause.error_type is ErrorType.NetworkError
    client = diagnose(pipeline, text.format(frame="urllib3/util/connection.py"))
    assert client.root_cause.error_type is ErrorType.ConnectionError


def test_rays_task_error_caption_is_a_traceback_where_the_log_starts(pipeline: Pipeline) -> None:
    """Ray prints `RayTaskError(X): ray::f() (pid=..)` above the task's frames: a log cut before
    the task's own final line still names the failure by the caption's inner class."""
    text = """
ray.exceptions.RayTaskError(OutOfMemoryError): ray::DTensorPolicyWorker.get_logprobs() (pid=2671339, ip=10.65.16.209, actor_id=d5836b)
  File "/usr/lib/python3.12/concurrent/futures/_base.py", line 453, in result
    return self.__get_result()
  File "/workspace/nemo_rl/models/policy/dtensor_policy_worker.py", line 653, in get_logprobs
    token_logprobs = forward(
"""
    (rec,) = records(text)
    assert rec.in_traceback and rec.inner == "OutOfMemoryError"
    assert diagnose(pipeline, text).root_cause.error_type is ErrorType.OutOfMemoryError
    # the same `Class(Inner): text` form without Ray's `ray::` task name is no caption
    (other,) = records("mylib.TaskError(KeyError): failed to run f\n")
    assert not other.in_traceback


# ---- an exhausted resource in a chain -----------------------------------------------------------

MEMORY_THEN_WRITER = """
Traceback (most recent call last):
  File "torch/serialization.py", line 379, in save
    _save(obj, opened_zipfile, pickle_module, pickle_protocol)
  File "torch/serialization.py", line 499, in _save
    zip_file.write_record(name, storage.data_ptr(), num_bytes)
MemoryError

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "torch/serialization.py", line 259, in __exit__
    self.file_like.write_end_of_file()
RuntimeError: [enforce fail at inline_container.cc:300] . unexpected pos 6057217600 vs 6057217496
"""


def test_what_fails_while_an_exhausted_resource_is_handled_is_its_consequence(pipeline: Pipeline) -> None:
    # the writer's half-written file fails to close because memory ran out mid-write: the
    # checkpoint writer's rule (a full disk, usually) would outrank MemoryError on its own
    d = diagnose(pipeline, MEMORY_THEN_WRITER)
    assert d.root_cause.error_type is ErrorType.HostOOMKilled
    assert {c.error_type: c.role for c in d.co_occurring}[ErrorType.StorageError] == Role.SYMPTOM


def test_the_writer_failure_alone_keeps_its_reading(pipeline: Pipeline) -> None:
    alone = MEMORY_THEN_WRITER.split("During handling")[1].split("\n", 2)[2]
    assert diagnose(pipeline, alone).root_cause.error_type is ErrorType.StorageError


def test_a_handler_failing_after_an_ordinary_error_is_not_read_as_a_consequence(pipeline: Pipeline) -> None:
    # (only running out of memory or disk makes the next failure its consequence)
    text = MEMORY_THEN_WRITER.replace("MemoryError", "KeyError: 'step'")
    assert diagnose(pipeline, text).root_cause.error_type is ErrorType.StorageError


# ---- round of 2026-12-07: feeder threads, library exception modules ----------------------------

# a multiprocessing queue's feeder thread prints what it could not send and goes on
FEEDER_EPIPE = """
Traceback (most recent call last):
  File "/usr/lib/python3.8/multiprocessing/queues.py", line 245, in _feed
    send_bytes(obj)
  File "/usr/lib/python3.8/multiprocessing/connection.py", line 411, in _send_bytes
    self._send(header + buf)
  File "/usr/lib/python3.8/multiprocessing/connection.py", line 368, in _send
    n = write(self._handle, buf)
BrokenPipeError: [Errno 32] Broken pipe
"""


def test_a_broken_pipe_in_a_queue_feeder_thread_is_the_reader_gone(pipeline: Pipeline) -> None:
    (rec,) = records(FEEDER_EPIPE)
    assert rec.teardown == "the queue's reader had exited"
    d = diagnose(pipeline, "epoch 3 step 100 loss 0.52\n" + FEEDER_EPIPE)
    assert (d.root_cause.error_type, d.action.kind) == ("Unknown", "investigate")


def test_a_full_dev_shm_in_a_queue_feeder_thread_stays_a_failure(pipeline: Pipeline) -> None:
    text = FEEDER_EPIPE.replace("BrokenPipeError: [Errno 32] Broken pipe", "OSError: [Errno 28] No space left on device")
    (rec,) = records(text)
    assert rec.teardown is None
    assert diagnose(pipeline, text).root_cause.error_type == "OSError"


@pytest.mark.parametrize("line,etype", [
    # a class named neither ...Error nor ...Exception, in a library's errors / exceptions module
    ("triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 232448, Hardware limit: "
     "101376. Reducing block sizes or `num_stages` may help.", "CUDAError"),
])
def test_a_module_qualified_exception_line_alone_is_typed_by_the_table(pipeline: Pipeline, line: str, etype: str) -> None:
    d = diagnose(pipeline, "step 1 loss 2.3\n" + line)
    assert d.root_cause.error_type == etype, d.root_cause


def test_a_bare_word_colon_line_is_still_no_exception() -> None:
    # (the errors / exceptions module reading needs the module path and a class-cased name)
    assert parse_exception_line("OutOfResources: out of resource") is None
    assert parse_exception_line("errors.INFO: x") is None
    assert parse_exception_line("triton.runtime.errors.OutOfResources: x")[2] == "OutOfResources"
