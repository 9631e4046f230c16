"""Ranking and policy principles learned from the real-failure corpus, on the shipped rules.

- a Python warning never outranks an exception (the program went on after the warning);
- what a glog / c10 emitter printed at its warning level, with nothing failing after it, is no
  failure; the same line followed by a traceback is still the cause;
- a non-finite loss is not "recovered" by later steps, and one the log shows from the start is
  investigated, not rolled back; a non-finite grad norm beside a loss that goes on is mixed
  precision's skipped step;
- a collective timeout caused by the job's own slow step (tokenizing, saving) is no_retry; one
  with no visible cause is investigated.
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


def hf_steps(n: int, start: int = 1) -> list[str]:
    return [f"{{'loss': 1.5, 'grad_norm': 0.9, 'learning_rate': 2e-05, 'epoch': {i / 100:.2f}}}"
            for i in range(start, start + n)]


TIMEOUT = ("[E ProcessGroupNCCL.cpp:475] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, "
           "OpType=ALLREDUCE, NumelIn=25165824, NumelOut=25165824, Timeout(ms)=1800000) ran for 1800529 milliseconds before timing out.")


def test_a_warning_never_outranks_an_exception(pipe):
    lines = ["/env/lib/python3.9/site-packages/torch/cuda/__init__.py:138: UserWarning: CUDA initialization: The "
             "NVIDIA driver on your system is too old (found version 10020).",
             "Traceback (most recent call last):", '  File "train.py", line 3, in <module>',
             "socket.timeout: timed out"]
    d = run(pipe, "\n".join(lines) + "\n")
    assert (d.root_cause.error_type, d.action.kind) == ("ConnectionError", "retry")
    # alone, the warning is still reported (it is the only signal)
    d = run(pipe, lines[0] + "\n")
    assert d.root_cause.error_type == "CUDAError"


DLOPEN_W = ("2022-12-09 16:44:07.597312: W tensorflow/compiler/xla/stream_executor/platform/default/dso_loader.cc:64] "
            "Could not load dynamic library 'libnvinfer.so.7'; dlerror: libnvinfer.so.7: cannot open shared object "
            "file: No such file or directory")


def test_an_error_printed_at_glog_warning_level_alone_is_no_failure(pipe):
    lines = [DLOPEN_W, "2022-12-09 16:44:07.597403: I tensorflow/compiler/xla/stream_executor/cuda/cudart_stub.cc:29] "
             "Ignore above cudart dlerror if you do not have a GPU set up on your machine.", "Processing file 1/3"]
    d = run(pipe, "\n".join(lines) + "\n")
    assert d.root_cause.error_type == "Unknown" and d.action.kind == "investigate"
    assert any(c.role == "recovered" and c.error_type == "ImportError" for c in d.co_occurring)
    # the same message at E(rror) level, or followed by a traceback, is a failure
    d = run(pipe, DLOPEN_W.replace(": W tensorflow", ": E tensorflow") + "\n")
    assert d.root_cause.error_type == "ImportError"
    d = run(pipe, "\n".join([DLOPEN_W, "Traceback (most recent call last):", '  File "train.py", line 3, in <module>',
                             "    import tensorrt", "ImportError: libnvinfer.so.7: cannot open shared object file: "
                             "No such file or directory"]) + "\n")
    assert d.root_cause.error_type == "ImportError"


def test_a_wrapper_relaying_an_error_line_at_info_level_is_an_error(pipe):
    # AlphaFold's run_docker.py logs the container's output at I(nfo); the line it relays is at E
    inner = ("2022-03-21 20:41:47.403578: E external/org_tensorflow/tensorflow/stream_executor/cuda/cuda_event.cc:29] "
             "Error polling for event status: failed to query event: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory "
             "access was encountered")
    relay = "I0322 05:41:47.767822 140571547043648 run_docker.py:222] "
    d = run(pipe, relay + inner + "\n")
    assert d.root_cause.error_type == "CUDAError"
    # relayed at W or I itself, it is still what the emitter went on from
    d = run(pipe, relay + inner.replace(": E external", ": W external") + "\nProcessing file 1/3\n")
    assert d.root_cause.error_type == "Unknown"


def test_a_tensorflow_op_failure_logged_at_warning_is_the_failure(pipe):
    # TensorFlow logs an op's failure at W from op_kernel.cc, then raises it; a log cut there
    lines = ["W tensorflow/core/common_runtime/bfc_allocator.cc:275] *_Ran out of memory trying to allocate 39.81MiB.**"
             "  See logs for memory state.",
             "W tensorflow/core/framework/op_kernel.cc:968] Resource exhausted: OOM when allocating tensor with "
             "shape[256,832,7,7]"]
    d = run(pipe, "\n".join(lines) + "\n")
    assert (d.root_cause.error_type, d.action.kind) == ("OutOfMemoryError", "no_retry")
    # TF 1's exception line repeats the class after the op's creation stack
    d = run(pipe, "ResourceExhaustedError (see above for traceback): OOM when allocating tensor with "
                  "shape[32,64,128,128]\n")
    assert d.root_cause.error_type == "OutOfMemoryError"


def test_a_stall_warning_at_glog_warning_level_still_shows_a_stall(pipe):
    line = ("[2019-10-09 09:32:52.156662: W horovod/common/stall_inspector.cc:105] One or more tensors were submitted "
            "to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of ranks for more "
            "than 60 seconds.")
    d = run(pipe, line + "\n")
    assert d.root_cause.error_type == "Hang"


MMENGINE = ("10/30 22:{m}:57 - mmengine - INFO - Epoch(train) [1][{n}/735]  lr: 1.9813e-04  eta: 2:44:49  time: 2.8874  "
            "data_time: 0.0042  memory: 10762  loss: {loss}  grad_norm: nan")


def test_a_nan_grad_norm_beside_a_loss_that_goes_on_is_an_overflow_the_scaler_skipped(pipe):
    lines = [MMENGINE.format(m=19, n=240, loss="2.5128"), MMENGINE.format(m=20, n=250, loss="2.4566")]
    d = run(pipe, "\n".join(lines) + "\n")
    assert d.root_cause.error_type == "Unknown"
    # a loss that collapsed to zero beside it is no health
    lines = [MMENGINE.format(m=19, n=240, loss="0.0000"), MMENGINE.format(m=20, n=250, loss="0.0000")]
    d = run(pipe, "\n".join(lines) + "\n")
    assert d.root_cause.error_type == "NaNLoss"


def test_nan_is_not_recovered_by_more_steps(pipe):
    bars = [f" {i}%|█         | {i * 20}/2000 [03:12<23:30,  1.25it/s]" for i in range(11, 16)]
    lines = hf_steps(20) + ["Epoch: 0, Step: 1000 / 230430, loss = nan"] + bars
    d = run(pipe, "\n".join(lines) + "\n")
    assert d.root_cause.error_type == "NaNLoss" and d.action.kind == "rollback_and_skip"


def test_a_nan_the_same_quantity_recovers_from_is_a_skipped_step(pipe):
    # fp16 loss scaling: one interval logs grad_norm nan (the step was skipped), the next is finite
    head = " Epoch [1][{n}/62598]\tlr: 1.000e-03, time: 0.539, loss: {loss}, grad_norm: {g}"
    lines = [head.format(n=100, loss=1.9091, g="nan"), head.format(n=200, loss=0.9186, g=3.9772)]
    d = run(pipe, "\n".join(lines) + "\n")
    assert d.root_cause.error_type == "Unknown" and d.action.kind == "investigate"
    d = run(pipe, lines[1] + "\n" + lines[0] + "\n")  # nan at the end: not recovered
    assert d.root_cause.error_type == "NaNLoss"


def test_a_lone_nan_the_trainer_skipped_is_recovered_a_repeated_one_is_not(pipe):
    skip = "2021-04-23 19:22:{s:02d},420 (trainer:581) WARNING: The grad norm is nan. Skipping updating the model."
    going = "2021-04-23 19:23:{s:02d},245 (trainer:636) INFO: 2epoch:train:12009-12640batch: iter_time=3.1e-04, acc=0.9"
    d = run(pipe, "\n".join([skip.format(s=1), going.format(s=2), going.format(s=3)]) + "\n")
    assert d.root_cause.error_type == "Unknown"
    d = run(pipe, "\n".join([skip.format(s=k) for k in range(1, 8)] + [going.format(s=9), skip.format(s=10)]) + "\n")
    assert (d.root_cause.error_type, d.action.kind) == ("NaNLoss", "rollback_and_skip")


def test_nan_in_the_first_steps_is_investigated_and_a_nan_of_unknown_step_rolled_back(pipe):
    d = run(pipe, "epoch: 0|step: 3|ppo_ep: 1|act_loss: inf|cri_loss: inf\n")  # the line names step 3
    assert (d.root_cause.error_type, d.action.kind) == ("NaNLoss", "investigate")
    d = run(pipe, "epoch: 0|step: 3196|ppo_ep: 1|act_loss: inf|cri_loss: inf\n")  # the line names a late step
    assert (d.root_cause.error_type, d.action.kind) == ("NaNLoss", "rollback_and_skip")
    # no training shown before it: the log may be cut at its start, so the step is unknown
    d = run(pipe, "loading model\nloss tensor(nan, device='cuda:0', dtype=torch.float16)\n")
    assert (d.root_cause.error_type, d.action.kind) == ("NaNLoss", "rollback_and_skip")


def test_fp16_loss_scale_collapse_is_nan_loss(pipe):
    lines = [f"| WARNING: overflow detected, setting loss scale to: {2.0 ** -k}" for k in range(8, 14)]
    d = run(pipe, "\n".join(lines) + "\n")
    assert (d.root_cause.error_type, d.action.kind) == ("NaNLoss", "rollback_and_skip")
    assert run(pipe, "| WARNING: overflow detected, setting loss scale to: 64.0\n").root_cause.error_type != "NaNLoss"


@pytest.mark.parametrize("step", [
    "Running tokenizer on dataset:   9%|███▊      | 280000/2969526 [29:55<4:47:28, 155.96 examples/s]",
    "[default0]:Grouping texts in chunks of 2049:   8%|▊         | 726000/9672101 [02:32<30:38, 4866.01 examples/s]",
    "Saving model checkpoint to /output/checkpoint-500",
])
def test_a_timeout_behind_the_jobs_own_slow_step_is_no_retry(pipe, step):
    d = run(pipe, "\n".join([step] + [TIMEOUT.format(r=r) for r in (1, 2, 3)]) + "\n")
    assert d.root_cause.error_type == "NCCLTimeoutError" and d.action.kind == "no_retry"


@pytest.mark.parametrize("steps_between", [5, 2000])
def test_a_checkpoint_saved_before_training_went_on_is_not_the_cause_of_a_timeout(pipe, steps_between):
    # a pretraining log saves every few hundred steps: the save hours before a timeout, with
    # training going on after it, is history; the timeout is retried like one with no cause
    lines = (hf_steps(50) + ["Saving model checkpoint to /output/checkpoint-500"] + hf_steps(steps_between, 51)
             + [TIMEOUT.format(r=r) for r in range(4)])
    d = run(pipe, "\n".join(lines) + "\n")
    assert (d.root_cause.error_type, d.action.kind) == ("NCCLTimeoutError", "retry"), d.action


def test_a_save_running_when_the_timeout_fired_is_its_cause_in_a_periodic_saving_log(pipe):
    lines = []
    for k in range(1, 5):  # saves every 100 steps; the last one hangs rank 0
        lines += hf_steps(100, 100 * k) + [f"Saving model checkpoint to /output/checkpoint-{100 * k}"]
    d = run(pipe, "\n".join(lines + [TIMEOUT.format(r=r) for r in (1, 2, 3)]) + "\n")
    assert (d.root_cause.error_type, d.action.kind) == ("NCCLTimeoutError", "no_retry"), d.action


TIMED_SAVE = """\
[2025-03-02 10:00:01] step 41000 loss 2.113 lr 3.0e-4
[2025-03-02 10:00:31] step 41010 loss 2.101 lr 3.0e-4
[2025-03-02 {save}] Saving model checkpoint to /ckpt/run7/checkpoint-41010
[2025-03-02 11:58:00] INFO data loader: shard 118 opened
[2025-03-02 12:10:00] [rank3]:[E302 12:10:00.000000 4003 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=45012, OpType=ALLREDUCE, NumelIn=262144000, NumelOut=262144000, Timeout(ms)=600000) ran for 600046 milliseconds before timing out.
"""


def test_a_save_older_than_the_collectives_deadline_is_not_its_cause(pipe):
    # no training step between the save and the timeout, but the time stamps say the save began
    # two hours before a collective with a 10-minute deadline: history, not the step it waited on
    d = run(pipe, TIMED_SAVE.format(save="10:01:00"))
    assert (d.root_cause.error_type, d.action.kind) == ("NCCLTimeoutError", "retry"), d.action
    # six minutes before it, within the deadline: the save held the others up
    d = run(pipe, TIMED_SAVE.format(save="12:04:00"))
    assert (d.root_cause.error_type, d.action.kind) == ("NCCLTimeoutError", "no_retry"), d.action


def test_a_timeout_with_no_visible_cause_is_retried(pipe):
    # restart from the last checkpoint; the controller's fingerprint budget stops a repeat
    d = run(pipe, "\n".join(hf_steps(3) + [TIMEOUT.format(r=r) for r in range(4)]) + "\n")
    assert d.root_cause.error_type == "NCCLTimeoutError" and d.action.kind == "retry"


def test_disk_full_is_never_retried_whatever_carries_it(pipe):
    # a full disk or quota is typed OSError (as the labelled real logs type it); a checkpoint
    # writer failing mid-file with no errno is a StorageError; neither is retried as it is
    for line, kind in (("OSError: [Errno 28] No space left on device", "OSError"),
                       ("RuntimeError: [enforce fail at inline_container.cc:595] . unexpected pos 3012542848 vs "
                        "3012542736", "StorageError"),
                       ("safetensors_rust.SafetensorError: Error while serializing: IoError(Os { code: 28, kind: "
                        "StorageFull, message: \"No space left on device\" })", "OSError")):
        d = run(pipe, line + "\n")
        assert (d.root_cause.error_type, d.action.kind) == (kind, "no_retry"), line


def test_argparse_error_without_the_prog_prefix(pipe):
    d = run(pipe, "`error: unrecognized arguments: --local_rank=0`\n")
    assert (d.root_cause.error_type, d.action.kind) == ("ArgumentError", "no_retry")


def test_a_request_its_client_retried_is_not_the_cause(pipe):
    lines = ["Traceback (most recent call last):", "TimeoutError: The read operation timed out", "",
             "'(ReadTimeoutError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Read timed out. (read "
             "timeout=10)\"), '(Request ID: 4c1f)')' thrown while requesting HEAD https://huggingface.co/x/config.json",
             "Retrying in 1s [Retry 1/5].", "Traceback (most recent call last):", "KeyError: 'text'"]
    d = run(pipe, "\n".join(lines) + "\n")
    assert d.root_cause.error_type == "KeyError"
    assert ("ConnectionError", "recovered") in [(c.error_type, c.role) for c in d.co_occurring]


RETRYING = "n1:236813:236852 [1] NCCL INFO Call to connect returned Connection refused, retrying"
NCCL_UP = ["n1:236813:236852 [1] NCCL INFO Channel 00/02 :    0   1", "n1:236813:236852 [1] NCCL INFO Connected all rings",
           "n1:236813:236852 [1] NCCL INFO comm 0x5581 rank 1 nranks 2 cudaDev 1 busId 41000 - Init COMPLETE"]


def test_a_log_that_ends_in_a_retry_loop_shows_the_retries_never_got_through(pipe):
    d = run(pipe, "\n".join(["n1:236813:236813 [1] NCCL INFO Bootstrap : Using ib0:10.128.31.149<0>"]
                            + [RETRYING] * 4) + "\n")
    assert (d.root_cause.error_type, d.action.kind) == ("NetworkError", "retry")


def test_a_retry_loop_that_ends_in_a_warning_no_rule_types_still_failed(pipe):
    """NCCL gives up after its connect retries with a `Connect to ... failed` WARN; a post that cut
    it short (`NCCL WARN Connect to`) is an NCCL warning no rule types: no failure of its own,
    so the loop the log ends in is still the failure."""
    cut = "n1:236813:236852 [1] include/socket.h:390 NCCL WARN Connect to"
    d = run(pipe, "\n".join([RETRYING] * 3 + ["", cut]) + "\n")
    assert d.root_cause.error_type == "NetworkError", d.root_cause


@pytest.mark.parametrize(("host", "action"), [
    # a server on the job's own host (a reward model, an env server) that is not listening
    ("127.0.0.1", "no_retry"), ("localhost", "no_retry"), ("0.0.0.0", "no_retry"),
    # an external service over the network: the transient retry
    ("huggingface.co", "retry"), ("10.0.0.7", "retry"),
])
def test_a_request_to_a_service_on_the_jobs_own_host_is_its_set_up(pipe, host, action):
    line = (f"requests.exceptions.ConnectionError: HTTPConnectionPool(host='{host}', port=5000): Max retries "
            "exceeded with url: /get_reward (Caused by NewConnectionError('<urllib3.connection.HTTPConnection "
            "object at 0x7f2>: Failed to establish a new connection: [Errno 111] Connection refused'))")
    d = run(pipe, "\n".join(["Traceback (most recent call last):", '  File "train.py", line 9, in <module>', line]) + "\n")
    assert (d.root_cause.error_type, d.action.kind) == ("ConnectionError", action)


def test_a_retry_that_got_through_is_recovered(pipe):
    d = run(pipe, "\n".join([RETRYING] * 2 + NCCL_UP + ["Loading the dataset ..."] * 3) + "\n")
    assert d.root_cause.error_type == "Unknown"
    assert [(c.error_type, c.role) for c in d.co_occurring] == [("NetworkError", "recovered")]


def test_a_read_only_file_system_before_training_is_set_up_mid_run_a_storage_retry(pipe):
    erofs = "OSError: [Errno 30] Read-only file system: '/model_dir/checkpoint-0'"
    d = run(pipe, "loading dataset\n" + erofs + "\n")
    assert (d.root_cause.error_type, d.action.kind) == ("StorageError", "no_retry")
    steps = "\n".join(f"{{'loss': {2 - i / 100:.4f}, 'learning_rate': 2e-05, 'epoch': {i / 100:.2f}}}" for i in range(1, 20))
    d = run(pipe, steps + "\nSaving model checkpoint to /ckpt/checkpoint-3000\n" + erofs.replace("model_dir", "ckpt") + "\n")
    assert (d.root_cause.error_type, d.action.kind) == ("StorageError", "retry")


def test_a_metrics_lines_skipped_iterations_counter_is_no_skip_notice(pipe):
    # Megatron prints `number of skipped iterations: N` on every iteration line: a field, not the
    # guard saying it dropped this update
    # (a loss key no rule names, read format-free; the next line no longer prints it)
    line = (" iteration {n:8d}/  159576 | consumed samples: {s:12d} | learning rate: 5.000E-05 | TrainLoss: {v} "
            "| number of skipped iterations: {k:3d} | number of nan iterations: {k:3d} |")
    lines = [line.format(n=n, s=n * 28, v="2.431", k=0) for n in range(9020, 9027)]
    lines += [line.format(n=9027, s=9027 * 28, v="nan", k=1),
              line.format(n=9028, s=9028 * 28, v="x", k=1).replace("| TrainLoss: x ", ""),
              "[2022-03-10 08:01:12,004] [INFO] [logging.py:68:log_dist] [Rank 0] step=9028, skipped=1"]
    d = run(pipe, "\n".join(lines) + "\n")
    assert d.root_cause.error_type == "NaNLoss"


def test_an_abort_after_an_escaped_cpp_exception_carries_that_exceptions_message(pipe):
    """libstdc++ reports an uncaught exception (`terminate called after throwing an instance of
    ...`, its message on `what():`) and aborts: the abort is its consequence and does not outrank
    the message a rule types (Gloo's peer that closed the connection). An abort with no such report
    before it stays the failure."""
    lines = ["[0]<stderr>:terminate called after throwing an instance of 'gloo::IoException'",
             "[0]<stderr>:  what():  [/src/gloo/gloo/transport/tcp/pair.cc:572] Connection closed by peer [10.0.0.5]:53666",
             "[0]<stderr>:Fatal Python error: Aborted",
             "[0]<stderr>:Current thread 0x00007f (most recent call first):",
             '[0]<stderr>:  File "/usr/lib/python3/dist-packages/horovod/common/basics.py", line 60 in init']
    d = run(pipe, "\n".join(lines) + "\n")
    assert d.root_cause.error_type.value == "NetworkError"
    alone = [lines[2], lines[3]]
    assert run(pipe, "\n".join(alone) + "\n").root_cause.error_type.value == "Unknown"
    # the abort far below the report is not its consequence
    far = lines[:2] + [f"step {i} loss 1.0" for i in range(12)] + lines[2:]
    assert run(pipe, "\n".join(far) + "\n").root_cause.error_type.value == "Unknown"


def test_an_abort_after_a_reports_message_line_alone_carries_that_message(pipe):
    """The report's first line cut off (or printed to the other stream): the typed `what():`
    line alone still says which exception the abort that follows carries."""
    prefix = "[2024-02-27T21:35:28.89Z] fa88a9df [rank=4] || "
    what = ("  what():  [Rank 4] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
            "OpType=ALLGATHER, Timeout(ms)=1800000) ran for 1804782 milliseconds before timing out.")
    lines = [prefix + what, prefix + "Fatal Python error: Aborted", prefix, prefix + "Thread 0x00007eff (most recent call first):"]
    assert run(pipe, "\n".join(lines) + "\n").root_cause.error_type.value == "NCCLTimeoutError"
    # a message line that is no exception's (no `what():`) before an abort leaves the abort the failure
    plain = [prefix + what.replace("what():  ", ""), *lines[1:]]
    assert run(pipe, "\n".join(plain) + "\n").root_cause.error_type.value == "Unknown"


def test_a_client_that_never_reaches_its_server_fails_on_it(pipe):
    # trl's vLLM client polls its server; a log that ends in the loop never reached it (nothing
    # listens there: a restart does not start the server), one that trains on got through
    waiting = [f"2025-03-26 05:53:{s:02d} - INFO - trl.extras.vllm_client - Server is not up yet. Retrying in 2.0 seconds..."
               for s in range(10, 20, 2)]
    d = run(pipe, "\n".join(["Loading checkpoint shards: 100%", *waiting]) + "\n")
    assert (d.root_cause.error_type, d.action.kind) == ("ConnectionError", "no_retry"), d.root_cause
    d = run(pipe, "\n".join([*waiting, "INFO - trl.extras.vllm_client - Server is up.", *hf_steps(30)]) + "\n")
    assert d.root_cause.error_type == "Unknown", d.root_cause


def test_a_clients_giving_up_message_carries_the_connection_failure_it_gave_up_on(pipe):
    """transformers prints "We couldn't connect to 'https://huggingface.co' to load this file"
    in offline mode and after its connection attempts failed alike: alone it is the job's set-up
    (ModelLoadingError, no_retry); with the failed connection beside it (the hub client's retries,
    the traceback printed under it) the connection is the cause, retried though it was."""
    give_up = ("OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't find it in the "
               "cached files and it looks like bert-base-uncased is not the path to a directory containing a file "
               "named config.json.")
    d = run(pipe, "Loading model\n" + give_up + "\n")
    assert (d.root_cause.error_type, d.action.kind) == ("ModelLoadingError", "no_retry"), d.root_cause
    retried = ("'(MaxRetryError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded with url: "
               "/bert-base-uncased/resolve/main/config.json (Caused by ConnectTimeoutError(<urllib3.connection."
               "HTTPSConnection object at 0x7f>, 'Connection to huggingface.co timed out. (connect timeout=10)'))\"), "
               "'(Request ID: 1)')' thrown while requesting HEAD https://huggingface.co/bert-base-uncased/resolve/main/config.json")
    lines = ["Loading model", retried, "Retrying in 1s [Retry 1/5].", retried, "Retrying in 2s [Retry 2/5].", give_up]
    d = run(pipe, "\n".join(lines) + "\n")
    assert (d.root_cause.error_type, d.action.kind) == ("ConnectionError", "retry"), d.root_cause
    assert [(c.error_type, c.role) for c in d.co_occurring] == [("ModelLoadingError", "wrapper")]
    # a connection error far from the message (a wandb upload an hour earlier) is not what it gave up on
    far = [retried, "Retrying in 1s [Retry 1/5].", *hf_steps(60), give_up]
    assert run(pipe, "\n".join(far) + "\n").root_cause.error_type == "ModelLoadingError"
    # a give-up the job went on from (a tokenizer loaded from elsewhere) is no failure of the run
    # that later stalled: training after both makes them recovered
    went_on = [*lines, *hf_steps(60), TIMEOUT.format(r=0)]
    assert run(pipe, "\n".join(went_on) + "\n").root_cause.error_type == "NCCLTimeoutError"


def test_datasets_unreachable_hub_is_read_by_the_class_it_names(pipe):
    # datasets raises ConnectionError("Couldn't reach '{path}' on the Hub ({class})"): a request's
    # timeout or connection error is the Hub or the way to it; offline mode, and an older
    # release's LocalEntryNotFoundError (offline mode or a failed request alike), the set-up
    d = run(pipe, "ConnectionError: Couldn't reach 'tatsu-lab/alpaca' on the Hub (ConnectTimeout)\n")
    assert (d.root_cause.error_type, d.action.kind) == ("ConnectionError", "retry"), d.root_cause
    for cls in ("OfflineModeIsEnabled", "LocalEntryNotFoundError"):
        d = run(pipe, f"ConnectionError: Couldn't reach 'allenai/social_i_qa' on the Hub ({cls})\n")
        assert (d.root_cause.error_type, d.action.kind) == ("DatasetLoadingError", "no_retry"), d.root_cause


def test_a_daemon_the_launcher_never_reached_over_ssh_is_the_ssh_failure(pipe):
    # mpirun's "lost communication with a remote daemon" reads the same when the daemon's node
    # died and when ssh never started it (an address the poster replaced, as posted logs do)
    lost = ["--------------------------------------------------------------------------",
            "PRTE has lost communication with a remote daemon.", "",
            "  HNP daemon   : [prterun-master-0-34@0,0] on node master-0",
            "  Remote daemon: [prterun-master-0-34@0,1] on node (worker_ip)", "",
            "This is usually due to either a failure of the TCP network"]
    d = run(pipe, "\n".join(["mpirun -np 16 -N 8 -H hostfile ./all_reduce_perf",
                             "ssh: connect to host (worker_ip) port 22: Connection refused", *lost]) + "\n")
    assert d.root_cause.error_type == "NetworkError", d.root_cause
    assert d.action.kind != "isolate_and_restart"
    assert run(pipe, "\n".join(lost) + "\n").root_cause.error_type == "NodeFailure"


HCCL_INIT = """Traceback (most recent call last):
  File "train.py", line 12, in <module>
    torch.distributed.barrier()
RuntimeError: [ERROR] HCCL error in: torch_npu/csrc/distributed/ProcessGroupHCCL.cpp:64
[ERROR] 2024-05-21-11:57:54 (PID:927000, Device:3, RankID:3) ERR02200 DIST call hccl api failed.
EJ0001: 2024-05-21-11:57:54.167.645 Failed to initialize the HCCP process. Reason: Maybe the last training process is running.
"""


def test_a_library_wrapper_line_does_not_make_the_error_it_carries_a_peers_consequence(pipe):
    # torch_npu's `HCCL error in:` names no cause; CANN prints it on the next lines. As a cause
    # the wrapper made the HCCP failure below it a peer's consequence of "a process that died".
    d = run(pipe, HCCL_INIT)
    assert d.root_cause.error_type == "NCCLRemoteError"
    assert d.action.kind == "retry"


def test_an_hccl_result_code_decides_the_class_of_the_failed_call(pipe):
    line = ("RuntimeError: create_config:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:102 HCCL function error: "
            "HcclAllReduce(inputPtr, outputPtr, numel, dataType, op, comm, stream), error code is {}")
    assert run(pipe, line.format(11)).root_cause.error_type == "NCCLRemoteError"
    assert run(pipe, line.format(1)).root_cause.error_type == "RuntimeError"
    assert run(pipe, line.format(1)).action.kind == "no_retry"


# A c10d store client retrying its connect: the exception it retried carries c10::Error's C++
# backtrace (`Exception raised from ... (most recent call first):`, `frame #N: ...`). Those lines
# are the message's, so a log that ends on them ends in the retry loop: the retried error is the
# failure, not recovered.
STORE_RETRY_LOOP = [
    "[E1021 17:41:23.719491800 socket.cpp:1019] [c10d] The client socket has timed out after 300000ms while "
    "trying to connect to (10.0.0.26, 51216).",
    "[W1021 17:41:23.719778542 TCPStore.cpp:340] [c10d] TCP client failed to connect/validate to host "
    "10.0.0.26:51216 - retrying (try=0, timeout=300000ms, delay=55140ms): The client socket has timed out after "
    "300000ms while trying to connect to(10.0.0.26, 51216).",
    "Exception raised from throwTimeoutError at /pytorch/torch/csrc/distributed/c10d/socket.cpp:1021 (most recent "
    "call first):",
] + [f"frame #{i}: <unknown function> + 0x5d694d1 (0x7fb40f5354d1 in /env/lib/python3.12/site-packages/torch/lib/"
     "libtorch_cpu.so)" for i in range(6)]


def test_a_retry_loop_whose_backtrace_ends_the_log_is_the_failure(pipe):
    d = run(pipe, "\n".join(STORE_RETRY_LOOP) + "\n")
    assert d.root_cause.error_type == "NetworkError", d.root_cause


def test_a_retry_loop_that_training_outlived_is_recovered(pipe):
    d = run(pipe, "\n".join(STORE_RETRY_LOOP + hf_steps(12)) + "\n")
    assert d.root_cause.error_type != "NetworkError", d.root_cause


@pytest.mark.parametrize("line,etype", [
    # PyTorch's ROCm build prints CUDA's catalog in HIP's words
    ("RuntimeError: HIP error: invalid argument", "CUDAError"),
    ("RuntimeError: No HIP GPUs are available", "CUDAError"),
    ("RuntimeError: HIP error: an illegal memory access was encountered", "CUDAError"),
    # a download that ended short of its announced size
    ("OSError: Consistency check failed: file should be of size 9860464979 but has size 4277965032 "
     "((…)l-00006-of-00007.bin).", "ConnectionError"),
    # libfabric's completion error: its EIO is the fabric's
    ("Unable to write to EQ: Missing or unavailable event queue. err: Input/output error (5) prov_errno: Unknown "
     "error -12 (-12) prov/efa/src/rxr/rxr.h:1343", "NetworkError"),
    # CUDA 12's contained fault of a peer access over NVLink
    ("torch.AcceleratorError: CUDA error: Invalid access of peer GPU memory over nvlink or a hardware error",
     "NVLinkError"),
])
def test_emitter_wordings_read_by_their_mechanism(pipe, line, etype):
    d = run(pipe, "step 1 loss 2.3\n" + line + "\n")
    assert d.root_cause.error_type == etype, d.root_cause


def _epoch_log(end_lines: list[str]) -> str:
    lines = []
    for e, (start, end) in enumerate([("03:46:15", "03:59:31"), ("04:00:12", "04:13:30"), ("04:14:05", "04:26:40")], 26):
        lines += [f"[ Tue Nov 14 {start} 2023 ] Training epoch: {e}",
                  f"[ Tue Nov 14 {end} 2023 ] \tMean training loss: 0.52{e}.  Mean training acc: 83.{e}%.",
                  f"[ Tue Nov 14 {end} 2023 ] Eval epoch: {e}"]
    return "\n".join(lines + ["[ Tue Nov 14 04:26:51 2023 ] Training epoch: 29"] + end_lines) + "\n"


def test_a_training_loss_after_the_last_step_marker_is_training_going_on(pipe):
    # the epoch's marker is printed when it starts; its loss 13 minutes later is training, not a stall
    d = run(pipe, _epoch_log(["[ Tue Nov 14 04:40:09 2023 ] \tMean training loss: 0.5204.  Mean training acc: 83.46%.",
                              "[ Tue Nov 14 04:40:09 2023 ] Eval epoch: 29"]))
    assert d.root_cause.error_type == "Unknown", d.root_cause


def test_output_that_lasts_after_the_last_step_without_a_loss_is_still_a_stall(pipe):
    d = run(pipe, _epoch_log(["[ Tue Nov 14 04:40:09 2023 ] Eval epoch: 29"]))
    assert d.root_cause.error_type == "Hang", d.root_cause
