"""Readings taken from what an emitter can print rather than from one thread's wording: the
kernel's RAS memory reports, the HNS RoCE NIC's error completions, the HSA runtime's
out-of-resources abort, the toolchain's link failures, CPython's `-m` with no module, torch's
checkpoint loader failing on a generic exception, CUDA's unknown error (a GPU fault only
after the job trained on it), XLA's device-buffer allocation, Slurm's step daemon naming a node it could not
clean, a hung task's call trace inside a shared file system, PaddlePaddle's launcher reporting a
killed worker, torch's activation-checkpoint mismatch, NCCL reading a topology field as
optional, an HTTP client's status (401/403 refused, 5xx and 429 passing), Slurm's job launch
failure reason, an elastic Ray trainer losing an actor and a FUSE storage client that cannot
mount. End to end through the pipeline, each with a line of the same family that must not
read that way."""

from __future__ import annotations

import io

from app.core.pipeline import Pipeline
from app.core.types import ActionKind, ErrorType


def _diagnose(text: str):
    return Pipeline().diagnose(io.BytesIO(text.encode()), workers=1).diagnosis


STEP = "[2025-03-02 10:00:01] step 1200 loss 2.113 lr 3.0e-4\n"

# ---- the kernel's RAS reports of an uncorrected memory error ------------------------------------

CPER_UNCORRECTED = STEP + """\
[ 2454.830692] {6}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 0
[ 2454.830693] {6}[Hardware Error]: event severity: recoverable
[ 2454.830697] {6}[Hardware Error]:  section_type: memory error
[ 2454.830699] {6}[Hardware Error]:  node: 2 card: 3 module: 51 rank: 1 bank: 10 row: 30691 column: 56
[ 2454.830701] {6}[Hardware Error]:  error_type: 3, multi-bit ECC
Traceback (most recent call last):
  File "train.py", line 210, in <module>
RuntimeError: NCCL communicator was aborted on rank 3.
"""

MCE_USER_ACCESS = STEP + """\
[  183.650625] mce: Uncorrected hardware memory error in user-access at 8a398a400
[  183.650700] Memory failure: 0x8a398a: Sending SIGBUS to python:2201 due to hardware memory corruption
[  183.650800] Memory error not recovered
"""

CPER_CORRECTED = STEP + """\
[ 2454.830692] {1}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 1
[ 2454.830693] {1}[Hardware Error]: It has been corrected by h/w and requires no further action
[ 2454.830694] {1}[Hardware Error]: event severity: corrected
[ 2454.830701] {1}[Hardware Error]:  error_type: 2, single-bit ECC
[2025-03-02 10:00:31] step 1210 loss 2.101 lr 3.0e-4
"""


def test_an_uncorrected_memory_error_record_isolates_the_node():
    d = _diagnose(CPER_UNCORRECTED)
    assert d.root_cause.error_type is ErrorType.ECCError
    assert d.root_cause.rule_id == "ras-memory-uncorrected"
    assert d.action.kind is ActionKind.ISOLATE_AND_RESTART


def test_a_machine_check_in_user_memory_is_the_same_fault():
    d = _diagnose(MCE_USER_ACCESS)
    assert d.root_cause.error_type is ErrorType.ECCError
    assert d.action.kind is ActionKind.ISOLATE_AND_RESTART


def test_a_corrected_single_bit_error_is_no_failure():
    d = _diagnose(CPER_CORRECTED)
    assert d.root_cause.error_type is not ErrorType.ECCError
    assert d.action.kind is not ActionKind.ISOLATE_AND_RESTART


# ---- the HNS RoCE NIC's error completions (kernel driver and CANN's user-space library) ---------

HNS_LITE = """\
[ERROR] ROCE(2040034,train):2025-09-15-08:38:12.776.612 [hns_roce_lite.c:630]hns_roce_lite_handle_error_cqe(630) : error cqe status: 0x15
[ERROR] ROCE(2040034,train):2025-09-15-08:38:12.776.622 [hns_roce_lite.c:747]dump_err_cqe(747) : CQ(0x10) CQE(0x5) INDEX(0x00000000): 0x00041580
"""

HNS_KERNEL = STEP + """\
[ 8812.004417] hns_roce 0000:7d:00.0: error cqe status is: 0x15
[rank5]: RuntimeError: HCCL function error: HcclAllReduce(...), error code is 9
"""


def test_hns_roce_error_completions_are_the_network_in_both_wordings():
    for log in (HNS_LITE, HNS_KERNEL):
        d = _diagnose(log)
        assert d.root_cause.error_type is ErrorType.NetworkError, log
        assert d.root_cause.rule_id == "hns-roce-error-cqe"


# ---- the HSA runtime's queue abort for want of resources: the GPU's memory ----------------------

HSA_OUT_OF_RESOURCES = STEP + """\
:0:rocdevice.cpp            :3671: 8816238121 us: [pid:2512 tid:0x7f00] Callback: Queue 0x7efc Aborting with error : HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary resources. This error may also occur when the core runtime library needs to spawn threads or create internal OS-specific events. Code: 0x1008 Available Free mem : 4 MB
Aborted (core dumped)
"""

HSA_EXCEPTION = STEP + """\
:0:rocdevice.cpp            :2984: 1335 us: [pid:1843 tid:0x7fb7] Callback: Queue 0x7fb7 aborting with error : HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware exception. code: 0x1016
"""


def test_hsa_out_of_resources_is_the_gpu_out_of_memory():
    d = _diagnose(HSA_OUT_OF_RESOURCES)
    assert d.root_cause.error_type is ErrorType.OutOfMemoryError
    assert d.action.kind is ActionKind.NO_RETRY
    assert _diagnose(HSA_EXCEPTION).root_cause.error_type is not ErrorType.OutOfMemoryError


# ---- the toolchain: a build step that could not link -------------------------------------------

TRITON_LINK = """\
(WorkerDict pid=1310039) /usr/bin/ld: cannot find -lcuda: No such file or directory
(WorkerDict pid=1310039) collect2: error: ld returned 1 exit status
Error executing job with overrides: ['trainer.n_gpus_per_node=8']
"""

CLANG_LINK = """\
[2/3] c++ fused_adam.o -shared -L/usr/local/cuda/lib64 -lcudart -o fused_adam.so
clang: error: linker command failed with exit code 1 (use -v to see invocation)
"""

LD_WARNING = STEP + """\
/usr/bin/ld: warning: libcudart.so.11.0, needed by libops.so, not found (try using -rpath or -rpath-link)
[2025-03-02 10:00:31] step 1210 loss 2.101 lr 3.0e-4
"""


def test_a_link_failure_is_a_build_failure_in_gcc_and_clang_wordings():
    for log in (TRITON_LINK, CLANG_LINK):
        d = _diagnose(log)
        assert d.root_cause.error_type is ErrorType.CalledProcessError, log
        assert d.action.kind is ActionKind.NO_RETRY
    assert _diagnose(LD_WARNING).root_cause.error_type is not ErrorType.CalledProcessError


# ---- CPython: `python -m NAME` with no module NAME ---------------------------------------------

RUNPY_MISSING = """\
+ mpirun -np 4 python3 -m run --config configs/pick.yaml
/usr/bin/python3: No module named run
/usr/bin/python3: No module named run
-------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
-------------------------------------------------------
"""


def test_python_m_with_no_such_module_is_a_missing_module():
    d = _diagnose(RUNPY_MISSING)
    assert d.root_cause.error_type is ErrorType.ModuleNotFoundError
    assert d.action.kind is ActionKind.NO_RETRY


# ---- torch's checkpoint loader failing on a generic exception ----------------------------------

LOAD_EOF = """\
Loading checkpoint from /ckpt/exp_304/last.pt
Traceback (most recent call last):
  File "/work/train.py", line 50, in main
    step = load_checkpoint(path)
  File "/work/train.py", line 14, in load_checkpoint
    checkpoint = torch.load(path, map_location="cuda:0")
  File "/venv/lib/python3.10/site-packages/torch/serialization.py", line 815, in load
    return _legacy_load(opened_file, map_location, pickle_module, **pickle_load_args)
  File "/venv/lib/python3.10/site-packages/torch/serialization.py", line 1033, in _legacy_load
    magic_number = pickle_module.load(f, **pickle_load_args)
EOFError: Ran out of input
"""

SAVE_CANNOT_OPEN = """\
Traceback (most recent call last):
  File "/work/train.py", line 90, in <module>
    torch.save(state, path)
  File "/venv/lib/python3.10/site-packages/torch/serialization.py", line 440, in save
    with _open_zipfile_writer(f) as opened_zipfile:
  File "/venv/lib/python3.10/site-packages/torch/serialization.py", line 315, in _open_zipfile_writer
    return container(name_or_buffer)
  File "/venv/lib/python3.10/site-packages/torch/serialization.py", line 288, in __init__
    super().__init__(torch._C.PyTorchFileWriter(str(name)))
RuntimeError: File /ckpt/checkpoint_0.pt cannot be opened.
"""

EOF_ELSEWHERE = """\
Traceback (most recent call last):
  File "/work/serve.py", line 30, in <module>
    line = input()
EOFError: EOF when reading a line
"""


def test_a_generic_exception_inside_torch_load_is_a_checkpoint_that_cannot_be_read():
    d = _diagnose(LOAD_EOF)
    assert d.root_cause.error_type is ErrorType.ModelLoadingError
    assert d.action.kind is ActionKind.NO_RETRY


def test_the_same_module_saving_or_another_eof_is_not_a_load_failure():
    assert _diagnose(SAVE_CANNOT_OPEN).root_cause.error_type is not ErrorType.ModelLoadingError
    assert _diagnose(EOF_ELSEWHERE).root_cause.error_type is not ErrorType.ModelLoadingError


# ---- CUDA's unknown error names no GPU: read by when it came --------------------------------------

CUDA_UNKNOWN_AT_START = """\
[rank0]: Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2
Traceback (most recent call last):
  File "train.py", line 41, in <module>
    model = model.cuda()
RuntimeError: CUDA error: unknown error
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
"""

TF_CHECK_999 = """\
2024-01-01 12:00:00.000000: F tensorflow/core/common_runtime/gpu/gpu_device.cc:200] Check failed: err == cudaSuccess (999 vs. 0)
"""

CUDA_UNKNOWN_AFTER_TRAINING = STEP + """\
[2025-03-02 10:00:31] step 1210 loss 2.101 lr 3.0e-4
Traceback (most recent call last):
  File "train.py", line 300, in <module>
    loss.backward()
RuntimeError: CUDA error: unknown error
"""


def test_cuda_unknown_error_before_any_training_is_investigated_not_isolated():
    for log in (CUDA_UNKNOWN_AT_START, TF_CHECK_999):
        d = _diagnose(log)
        assert d.root_cause.error_type is ErrorType.CUDAError, log
        assert d.action.kind is ActionKind.INVESTIGATE, log


def test_cuda_unknown_error_after_the_job_trained_isolates():
    d = _diagnose(CUDA_UNKNOWN_AFTER_TRAINING)
    assert d.root_cause.rule_id == "cuda-unknown-error"
    assert d.action.kind is ActionKind.ISOLATE_AND_RESTART


# ---- XLA: a device buffer that could not be allocated ------------------------------------------

XLA_DEVICE_BUFFER = """\
RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to allocate 196.00M. That was not possible. There are 134.44M free.; (1x0x0_HBM0): while running replica 0 and partition 0 of a replicated computation (other replicas may have failed as well).
##### Command execution on worker 3 failed with exit status 1. Continuing.
"""


def test_an_xla_device_buffer_allocation_is_out_of_memory():
    d = _diagnose(XLA_DEVICE_BUFFER)
    assert d.root_cause.error_type is ErrorType.OutOfMemoryError


# ---- Slurm: the step daemon that could not kill the step names its node ------------------------

SLURM_KILL_TASK_FAILED = """\
[2020-12-14T09:43:55.500] [63532.0] error: *** STEP 63532.0 ON cn106 CANCELLED AT 2020-12-14T09:43:55 ***
[2020-12-14T09:43:55.502] [63532.extern] done with job
[2020-12-14T09:44:56.002] [63532.0] error: *** STEP 63532.0 STEPD TERMINATED ON cn106 AT 2020-12-14T09:44:56 DUE TO JOB NOT ENDING WITH SIGNALS ***
[2020-12-14T09:44:58.306] [63532.0] done with job
"""


def test_slurm_kill_task_failed_names_the_node_to_drain():
    d = _diagnose(SLURM_KILL_TASK_FAILED)
    assert d.root_cause.error_type is ErrorType.NodeFailure
    assert d.action.kind is ActionKind.ISOLATE_AND_RESTART
    assert d.action.suspect_hosts == ["cn106"]


# ---- the kernel's hung-task watchdog: a process stuck in the kernel ------------------------------

HUNG_TASK = STEP + """\
[  +0.000049] task:python3.11      state:D stack:    0 pid:15277 ppid: 15257 flags:0x00000002
[  +0.000006] Call Trace:
[  +0.000003]  <TASK>
[  +0.000004]  __schedule+0x23d/0x590
[  +0.000005]  uvm_page_tree_get_ptes_async+0x93/0x970 [nvidia_uvm]
"""

HUNG_TASK_AFTER_XID = STEP + """\
[Sat Oct 12 18:35:32 2024] NVRM: Xid (PCI:0000:61:00): 79, pid=1496200, name=python3, GPU has fallen off the bus.
[Sat Oct 12 18:38:44 2024] INFO: task cache_mgr_event:620917 blocked for more than 120 seconds.
[Sat Oct 12 18:38:44 2024] "echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.
"""


def test_a_task_stuck_in_the_kernel_is_a_hang_when_nothing_else_explains_it():
    d = _diagnose(HUNG_TASK)
    assert d.root_cause.error_type is ErrorType.Hang
    assert d.root_cause.rule_id == "kernel-hung-task"
    assert d.action.kind is ActionKind.INVESTIGATE


def test_a_hung_task_beside_a_gpu_fault_is_that_faults_consequence():
    d = _diagnose(HUNG_TASK_AFTER_XID)
    assert d.root_cause.error_type is not ErrorType.Hang
    assert d.action.kind is ActionKind.ISOLATE_AND_RESTART


# ---- the same hung task, stuck inside a shared file system's module ----------------------------

HUNG_TASK_IN_GPFS = STEP + """\
[Sat Mar  4 04:10:52 2023] INFO: task python:280058 blocked for more than 120 seconds.
[Sat Mar  4 04:10:52 2023] task:python          state:D stack:    0 pid:280058 ppid:279966 flags:0x00000080
[Sat Mar  4 04:10:52 2023] Call Trace:
[Sat Mar  4 04:10:52 2023]  __schedule+0x2d1/0x860
[Sat Mar  4 04:10:52 2023]  cxiWaitEventWait+0x208/0x330 [mmfslinux]
[Sat Mar  4 04:10:52 2023]  _ZN13KernelMailbox21sendToDaemonWithReplyEv+0x250/0x3e0 [mmfs26]
"""

HUNG_TASK_IN_NFS = STEP + """\
[ 7320.118202] INFO: task python:4411 blocked for more than 122 seconds.
[ 7320.118260] Call Trace:
[ 7320.118270]  __schedule+0x2e3/0x740
[ 7320.118290]  rpc_wait_bit_killable+0x1e/0x90 [sunrpc]
[ 7320.118301]  nfs_updatepage+0x1b2/0x9a0 [nfs]
"""


def test_a_task_stuck_in_a_shared_file_system_is_the_storage():
    for text in (HUNG_TASK_IN_GPFS, HUNG_TASK_IN_NFS):
        d = _diagnose(text)
        assert d.root_cause.error_type is ErrorType.StorageError
        assert d.root_cause.rule_id == "kernel-trace-shared-fs"
        assert d.action.kind is ActionKind.RETRY


def test_a_task_stuck_in_the_gpu_driver_or_a_local_disk_stays_a_hang():
    local = HUNG_TASK.replace("[nvidia_uvm]", "[ext4]")
    for text in (HUNG_TASK, local):
        assert _diagnose(text).root_cause.error_type is ErrorType.Hang


# ---- PaddlePaddle's launcher reporting a worker's return code -----------------------------------

PADDLE_CONTAINER = """\
LAUNCH INFO 2024-03-10 00:35:50,211 Pod failed
LAUNCH ERROR 2024-03-10 00:35:50,216 Container failed !!!
Container rank 0 status failed cmd ['/usr/bin/python', '-u', 'tools/train.py', '-c', 'rec.yml'] code {code} log ./debug/workerlog.0
"""


def test_paddle_launch_reporting_a_sigkilled_worker_is_the_host_oom_killer():
    d = _diagnose(PADDLE_CONTAINER.format(code=-9))
    assert d.root_cause.error_type is ErrorType.HostOOMKilled
    assert d.action.kind is ActionKind.NO_RETRY


def test_paddle_launch_reporting_a_plain_exit_code_names_no_cause():
    d = _diagnose(PADDLE_CONTAINER.format(code=1))
    assert d.root_cause.error_type is not ErrorType.HostOOMKilled


# ---- torch's activation checkpointing finding a recomputation that differs ---------------------

CHECKPOINT_MISMATCH = """\
Traceback (most recent call last):
  File "train.py", line 88, in <module>
    loss.backward()
  File "/opt/conda/lib/python3.11/site-packages/torch/utils/checkpoint.py", line 902, in check_recomputed_tensors_match
    raise CheckpointError(
torch.utils.checkpoint.CheckpointError: torch.utils.checkpoint: Recomputed values for the following tensors have different metadata than during the forward pass.
tensor at position 14:
saved metadata: {'shape': torch.Size([2047, 1]), 'dtype': torch.float32, 'device': device(type='cuda', index=0)}
recomputed metadata: {'shape': torch.Size([4094, 1]), 'dtype': torch.float32, 'device': device(type='cuda', index=0)}
"""

CHECKPOINT_MISMATCH_TAIL = """\
[rank0]: tensor at position 158:
[rank0]: saved metadata: {'shape': torch.Size([5120]), 'dtype': torch.bfloat16, 'device': device(type='cuda', index=0)}
[rank0]: recomputed metadata: {'shape': torch.Size([0]), 'dtype': torch.bfloat16, 'device': device(type='cuda', index=0)}
W0908 17:08:01.837000 3889263 site-packages/torch/distributed/elastic/multiprocessing/api.py:900] Sending process 3889428 closing signal SIGTERM
"""


def test_an_activation_checkpoint_mismatch_is_the_jobs_own_code_with_or_without_its_header():
    for text in (CHECKPOINT_MISMATCH, CHECKPOINT_MISMATCH_TAIL):
        d = _diagnose(text)
        assert d.root_cause.error_type is ErrorType.RuntimeError
        assert d.action.kind is ActionKind.NO_RETRY


# ---- NCCL's topology attributes: an INFO line is a field read as optional, the WARN a failure ---

NCCL_TOPO_INFO = """\
NCCL version 2.7.8+cuda11.1
gpu23:1513:1527 [1] NCCL INFO Attribute coll of node net not found
gpu23:1513:1527 [1] NCCL INFO Attribute coll of node net not found
gpu23:1513:1527 [1] NCCL INFO Channel 00 : 0[2000] -> 1[3000] via P2P/IPC
"""


def test_nccl_reading_a_topology_field_as_optional_is_no_failure():
    d = _diagnose(NCCL_TOPO_INFO)
    assert d.root_cause.error_type is ErrorType.Unknown
    warned = NCCL_TOPO_INFO.replace("NCCL INFO Attribute", "graph/xml.h:101 NCCL WARN Attribute")
    assert _diagnose(warned).root_cause.error_type is ErrorType.NetworkError


# ---- an HTTP status is the server's verdict: 401/403 refuse, 5xx/429 pass ------------------------

def test_an_http_access_refusal_is_the_jobs_own_credentials_whatever_the_client():
    for line in ("requests.exceptions.HTTPError: 403 Client Error: Forbidden for url: https://huggingface.co/org/m.git/info/lfs/objects/batch",
                 "HfHubHTTPError: 403 Client Error: Forbidden for url: https://huggingface.co/api/models/org/m/commit/main",
                 "urllib.error.HTTPError: HTTP Error 401: Unauthorized"):
        d = _diagnose(STEP + "Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n" + line + "\n")
        assert (d.root_cause.error_type, d.action.kind) == (ErrorType.PermissionError, ActionKind.NO_RETRY), line
    d = _diagnose(STEP + "Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n"
                  "requests.exceptions.HTTPError: 503 Server Error: Service Unavailable for url: https://huggingface.co/x\n")
    assert (d.root_cause.error_type, d.action.kind) == (ErrorType.ConnectionError, ActionKind.RETRY)


def test_a_client_logging_a_server_error_status_is_a_passing_service_fault():
    for line in ("2022-07-19 21:15:58,526 ERROR   MainThread:2484870 [internal_api.py:execute():143] 500 response executing GraphQL.",
                 "Ultralytics: Unhandled server error. Retrying 10x for 3600s. If this issue persists please visit "
                 "https://github.com/ultralytics/hub/issues for assistance. (500 #4)"):
        d = _diagnose(STEP + line + "\n")
        assert (d.root_cause.error_type, d.action.kind) == (ErrorType.ConnectionError, ActionKind.RETRY), line
    d = _diagnose(STEP + "2022-07-19 21:15:58,526 ERROR   MainThread:1 [internal_api.py:execute():143] 404 response executing GraphQL.\n")
    assert d.root_cause.error_type is not ErrorType.ConnectionError


# ---- node loss as a scheduler's job reason and as an elastic Ray trainer reports it ---------------

def test_slurms_launch_failure_reason_is_the_node_and_its_exit_code_reason_is_not():
    d = _diagnose("$ sbatch --exclusive -N1 -w gpu-214 --gres=gpu:8 --wrap 'sleep 20'\n"
                  "JobId=4242 JobName=train JobState=FAILED Reason=JobLaunchFailure Dependency=(null)\n")
    assert (d.root_cause.error_type, d.action.kind) == (ErrorType.NodeFailure, ActionKind.ISOLATE_AND_RESTART)
    d = _diagnose("JobId=4242 JobName=train JobState=FAILED Reason=NonZeroExitCode Dependency=(null)\n")
    assert d.root_cause.error_type is not ErrorType.NodeFailure


def test_an_elastic_ray_trainer_losing_an_actor_is_a_node_loss_unless_training_went_on():
    lost = ("2021-08-26 14:13:10,001  INFO main.py:900 -- [RayXGBoost] Training in progress (31 seconds since last restart).\n"
            "2021-08-26 14:13:17,067  INFO elastic.py:156 -- Actor status: 7 alive, 1 dead (8 total)\n"
            "2021-08-26 14:13:18,120  WARNING main.py:1080 -- A Ray actor died during training. Trying to continue "
            "training on the remaining actors. This will use 7 existing actors and start 0 new actors.\n")
    d = _diagnose(STEP + lost)
    assert (d.root_cause.error_type, d.action.kind) == (ErrorType.NodeFailure, ActionKind.ISOLATE_AND_RESTART)
    d = _diagnose("2021-08-26 14:13:17,067  INFO elastic.py:156 -- Actor status: 8 alive, 0 dead (8 total)\n" + STEP)
    assert d.root_cause.error_type is ErrorType.Unknown
    # elastic training went on with the remaining actors: the job lived through it
    went_on = "".join(f"[2025-03-02 10:{m:02d}:01] step {1300 + 100 * m} loss 2.0{m} lr 3.0e-4\n" for m in range(1, 5))
    d = _diagnose(STEP + lost + went_on)
    assert d.root_cause.error_type is ErrorType.Unknown


# ---- a FUSE storage client that cannot mount ------------------------------------------------------

def test_a_storage_mount_that_fails_is_storage_and_one_missing_its_settings_is_not_retried():
    d = _diagnose("AzureMLCompute job failed.\nBFSMountError: Unable to mount blob fuse file system\n")
    assert (d.root_cause.error_type, d.action.kind) == (ErrorType.StorageError, ActionKind.RETRY)
    d = _diagnose("daemonize.Run: readFromProcess: sub-process: Error while mounting gcsfuse: mountWithArgs: "
                  "mountWithStorageHandle: Mount: mount: exec: \"fusermount\": executable file not found in $PATH\n")
    assert (d.root_cause.error_type, d.action.kind) == (ErrorType.StorageError, ActionKind.NO_RETRY)
    d = _diagnose("File system has been successfully mounted.\n" + STEP)
    assert d.root_cause.error_type is ErrorType.Unknown
