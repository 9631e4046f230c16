"""Emitter-catalog rules (`catalog: true`): their schema (`source:`), the `catalogs` ablation
switch in the rules loader, and end-to-end diagnoses of logs from at least two emitters per
catalog (NCCL, CUDA runtime, Xid buckets, node loss, object stores, shared filesystems)."""

from __future__ import annotations

import io

import pytest

from app.core import ablation
from app.core.pipeline import Pipeline
from app.core.rules import DEFAULT_RULES_DIR, RuleError, load_rules
from app.core.types import ActionKind, ErrorType


CATALOG_FILES = {"catalog_nccl.yaml", "catalog_cuda.yaml", "nodeloss.yaml", "objectstore.yaml", "sharedfs.yaml", "catalog_pip.yaml", "catalog_ssh.yaml",
                 "catalog_ucx.yaml", "catalog_ofi.yaml", "catalog_ascend.yaml", "catalog_rocm.yaml", "catalog_ompi.yaml",
                 "catalog_habana.yaml", "catalog_xpu.yaml", "catalog_neuron.yaml", "catalog_pyxis.yaml",
                 "catalog_nccl_warn.yaml", "catalog_metal.yaml", "catalog_pslite.yaml", "catalog_oneccl.yaml",
                 "catalog_windows.yaml", "catalog_ras.yaml"}

CATALOG_DIAG = """\
kind: diagnosis
family: t-catalog
catalog: true
source: ["example/project src/errors.c @0123456"]
rules:
  - id: t-cat-node-gone
    error_type: NodeFailure
    priority: 90
    pattern: 'node \\S+ is gone'
    examples: {match: ['node n1 is gone'], no_match: ['node n1 is here']}
"""


@pytest.fixture
def ablate(monkeypatch):
    def set_off(value: str | None) -> None:
        if value is None:
            monkeypatch.delenv("LOGDX_ABLATE", raising=False)
        else:
            monkeypatch.setenv("LOGDX_ABLATE", value)
        ablation._off.cache_clear()

    yield set_off
    monkeypatch.delenv("LOGDX_ABLATE", raising=False)
    ablation._off.cache_clear()


# ---- schema ------------------------------------------------------------------------------------

def test_a_catalog_file_marks_its_rules_and_keeps_its_source(rules_dir, ablate):
    ablate(None)
    (rules_dir / "cat.yaml").write_text(CATALOG_DIAG)
    rs = load_rules(rules_dir)
    rule = rs.diagnosis_by_id()["t-cat-node-gone"]
    assert rule.spec.catalog is True
    assert not rs.diagnosis_by_id()["t-ecc"].spec.catalog


def test_a_catalog_rule_without_a_source_is_refused(rules_dir, ablate):
    ablate(None)
    (rules_dir / "cat.yaml").write_text(CATALOG_DIAG.replace('source: ["example/project src/errors.c @0123456"]\n', ""))
    with pytest.raises(RuleError, match="t-cat-node-gone: a catalog rule names its source"):
        load_rules(rules_dir)


def test_a_rule_level_source_is_enough(rules_dir, ablate):
    ablate(None)
    text = CATALOG_DIAG.replace("catalog: true\n", "").replace('source: ["example/project src/errors.c @0123456"]\n', "")
    text = text.replace("    priority: 90\n", "    priority: 90\n    catalog: true\n    source: 'example/project errors.c v1'\n")
    (rules_dir / "cat.yaml").write_text(text)
    rule = load_rules(rules_dir).diagnosis_by_id()["t-cat-node-gone"]
    assert rule.spec.catalog and rule.spec.source == "example/project errors.c v1"


@pytest.mark.parametrize(("bad", "message"), [
    ("source: []", "source"),                     # an empty source list says nothing
    ("source: 'one string'", "source"),           # the file-level source is a list
    ("sources: ['x']", "sources"),                # unknown keys stay refused
])
def test_bad_source_keys_are_refused(rules_dir, ablate, bad, message):
    ablate(None)
    text = CATALOG_DIAG.replace('source: ["example/project src/errors.c @0123456"]', bad)
    (rules_dir / "cat.yaml").write_text(text)
    with pytest.raises(RuleError, match=message):
        load_rules(rules_dir)


def test_catalog_is_for_diagnosis_files_only(rules_dir, ablate):
    ablate(None)
    filters = rules_dir / "filters.yaml"
    filters.write_text(filters.read_text().replace("kind: filter\n", "kind: filter\ncatalog: true\n", 1))
    with pytest.raises(RuleError, match="catalog/source are for diagnosis rule files"):
        load_rules(rules_dir)


# ---- ablation ------------------------------------------------------------------------------------

def test_ablating_catalogs_drops_exactly_the_catalog_rules(rules_dir, ablate):
    (rules_dir / "cat.yaml").write_text(CATALOG_DIAG)
    ablate(None)
    full = load_rules(rules_dir)
    ablate("signals,catalogs")
    off = load_rules(rules_dir)  # from the warm cache: the cache holds every rule
    assert "t-cat-node-gone" in full.diagnosis_by_id()
    assert "t-cat-node-gone" not in off.diagnosis_by_id()
    assert [r.id for r in off.diagnosis] == [r.id for r in full.diagnosis if r.id != "t-cat-node-gone"]
    assert [r.id for r in off.filters] == [r.id for r in full.filters] and off.policies == full.policies
    assert off.version != full.version
    ablate("signals")
    assert "t-cat-node-gone" in load_rules(rules_dir).diagnosis_by_id()


def test_the_shipped_catalogs_are_marked_sourced_and_ablatable(ablate):
    ablate(None)
    full = load_rules()
    catalog = [r for r in full.diagnosis if r.spec.catalog]
    assert CATALOG_FILES <= {r.source for r in catalog}
    assert any(r.source == "xid.yaml" for r in catalog)  # the Xid buckets extend xid.yaml
    assert not any(r.spec.catalog for r in full.diagnosis if r.source == "cuda.yaml")
    for r in catalog:
        assert r.spec.source or r.source in CATALOG_FILES, f"{r.id} has no source"
    ablate("catalogs")
    off = load_rules()
    assert {r.id for r in off.diagnosis} == {r.id for r in full.diagnosis if not r.spec.catalog}


# ---- end to end: logs from two or more emitters per catalog -------------------------------------

def _diagnose(text: str):
    return Pipeline().diagnose(io.BytesIO(text.encode()), workers=1).diagnosis


def _ablated(text: str, ablate):
    ablate("catalogs")
    try:
        return _diagnose(text)
    finally:
        ablate(None)


NCCL_HCA_FATAL = """\
[2025-03-02 10:00:01] step 1200 loss 2.113
gpu-node-07:31245:31301 [3] NCCL WARN NET/IB : mlx5_3:1 async fatal event: local catastrophic error
gpu-node-07:31245:31301 [3] NCCL WARN communicator encountered a fatal error (detected in ncclIbIsend)
gpu-node-02:2210:2290 [1] NCCL WARN socketProgress: Connection closed by remote peer gpu-node-07<43210>
[rank9]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version 2.21.5
"""

NCCL_USAGE = """\
[rank0]: Initializing NCCL
node1:55:66 [0] NCCL WARN Message truncated : received 1024 bytes instead of 256
[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.21.5
"""

C10D_PEER_CRASH = """\
[rank3]: Traceback (most recent call last):
[rank3]:   File "train.py", line 88, in <module>
[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.1 GiB
node1:55:70 [0] NCCL WARN [Service thread] Could not receive type from localRank 3, res=3, closed=1
[rank0]:[E1015 10:12:00.123456 4321 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank 0] Received a dump signal due to a collective timeout from rank 1 and we will try our best to dump the debug info.
"""


def test_nccl_hca_fatal_event_isolates_the_host_that_printed_it():
    d = _diagnose(NCCL_HCA_FATAL)
    assert d.root_cause.rule_id == "nccl-cat-ib-device-fatal"
    assert d.action.kind is ActionKind.ISOLATE_AND_RESTART
    assert d.action.suspect_hosts == ["gpu-node-07"]
    symptoms = {c.rule_id: c.role for c in d.co_occurring}
    assert symptoms.get("nccl-remote-exited") == "symptom"


def test_nccl_usage_errors_are_not_restarted(ablate):
    d = _diagnose(NCCL_USAGE)
    assert d.root_cause.rule_id == "nccl-cat-usage"
    assert d.action.kind is ActionKind.NO_RETRY
    assert _ablated(NCCL_USAGE, ablate).root_cause.rule_id != "nccl-cat-usage"


def test_nccl_and_c10d_peer_loss_stays_a_symptom_of_the_crash():
    d = _diagnose(C10D_PEER_CRASH)
    assert d.root_cause.error_type is ErrorType.OutOfMemoryError
    roles = {c.rule_id: c.role for c in d.co_occurring}
    assert roles.get("nccl-cat-peer-lost") == "symptom"
    assert roles.get("c10d-dump-signal") == "symptom"


@pytest.mark.parametrize(("line", "rule_id", "action"), [
    # PyTorch wording, software class
    ("RuntimeError: CUDA error: too many resources requested for launch", "cuda-cat-software", ActionKind.NO_RETRY),
    # CuPy wording, environment class
    ("cupy_backends.cuda.api.runtime.CUDARuntimeError: cudaErrorStubLibrary: CUDA driver is a stub library",
     "cuda-cat-environment", ActionKind.NO_RETRY),
    # JAX / XLA wording (driver API names), software class
    ("jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Failed to load PTX text as a module: CUDA_ERROR_UNSUPPORTED_PTX_VERSION: "
     "the provided PTX was compiled with an unsupported toolchain.", "cuda-cat-software", ActionKind.NO_RETRY),
    # NCCL wording, environment class
    ("node1:55:66 [0] NCCL WARN Cuda failure 'system has unsupported display driver / cuda driver combination'",
     "cuda-cat-environment", ActionKind.NO_RETRY),
    # numba wording, hardware class (driver API name of the ECC error)
    ("numba.cuda.cudadrv.driver.CudaAPIError: [214] Call to cuMemcpyDtoH results in CUDA_ERROR_ECC_UNCORRECTABLE",
     "cuda-cat-ecc-driver-name", ActionKind.ISOLATE_AND_RESTART),
])
def test_cuda_catalog_classes(line, rule_id, action):
    d = _diagnose(f"step 10 loss 1.25\n{line}\n")
    assert d.root_cause.rule_id == rule_id
    assert d.action.kind is action


def test_cuda_teardown_error_is_not_the_cause():
    log = ("Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n"
           "ValueError: Expected input batch_size (32) to match target batch_size (16).\n"
           "[W CUDAGuardImpl.h:46] Warning: CUDA warning: driver shutting down (function uncheckedGetDevice)\n"
           "terminate called after throwing an instance of 'c10::Error' what(): CUDA error: driver shutting down\n")
    d = _diagnose(log)
    assert d.root_cause.error_type is ErrorType.ValueError


@pytest.mark.parametrize("what, expected", [
    # the C++ abort carries the runtime's shutdown: the process died while exiting, no failure
    ("CUDA error: driver shutting down", ErrorType.Unknown),
    # the same abort carrying a kernel fault is that fault
    ("CUDA error: an illegal memory access was encountered", ErrorType.CUDAError),
])
def test_a_cpp_abort_takes_the_state_of_what_it_carries(what, expected):
    log = ("epoch 99 | step 9900 | loss 0.79231 | accuracy 0.8823\n"
           "terminate called after throwing an instance of 'c10::CUDAError'\n"
           f"  what():  {what}\n"
           "Exception raised from query at /opt/pytorch/aten/src/ATen/cuda/CUDAEvent.h:95 (most recent call first):\n")
    d = _diagnose(log)
    assert d.root_cause.error_type is expected


@pytest.mark.parametrize("status, expected", [
    # the CUDA runtime unloading at exit: TensorFlow's abort over it is that teardown
    ("CUDA_ERROR_DEINITIALIZED", ErrorType.Unknown),
    ("CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure", ErrorType.CUDAError),
])
def test_tensorflows_event_abort_takes_the_state_of_the_error_before_it(status, expected):
    log = ("step 9990, loss = 0.79 (208.4 examples/sec; 0.307 sec/batch)\n"
           f"E tensorflow/stream_executor/cuda/cuda_event.cc:49] Error polling for event status: failed to query event: {status}\n"
           "F tensorflow/core/common_runtime/gpu/gpu_event_mgr.cc:198] Unexpected Event status: 1\n"
           "Aborted (core dumped)\n")
    assert _diagnose(log).root_cause.error_type is expected

XID_SYSLOG = ("Jul 14 03:12:40 node-12 kernel: NVRM: GPU at PCI:0000:3b:00: GPU-1a2b3c4d\n"
              "Jul 14 03:12:55 node-12 kernel: NVRM: Xid (PCI:0000:3b:00): 46, pid=2178, name=python, GPU stopped processing\n")
XID_DMESG_APP = ("[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, "
                 "Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter\n"
                 "[Fri Aug 30 11:43:14 2024] NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, "
                 "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005\n")
XID_DMESG_CE = "[  812.331] NVRM: Xid (PCI:0000:3b:00): 41, pid=2211, name=python, ROBUST_CHANNEL_CE2_ERROR\n"


def test_xid_reset_gpu_bucket_drains_the_syslog_host(ablate):
    d = _diagnose(XID_SYSLOG)
    assert d.root_cause.rule_id == "xid-cat-reset-gpu" and d.root_cause.xid == 46
    assert d.action.kind is ActionKind.ISOLATE_AND_RESTART
    assert d.action.suspect_hosts == ["node-12"]
    off = _ablated(XID_SYSLOG, ablate)
    assert off.root_cause.rule_id == "xid-other" and off.action.kind is ActionKind.INVESTIGATE


def test_xid_ctx_switch_timeout_after_an_application_xid_is_its_consequence():
    d = _diagnose(XID_DMESG_APP)
    assert d.root_cause.rule_id == "xid-app-fault"
    assert d.action.kind is ActionKind.INVESTIGATE
    alone = _diagnose(XID_DMESG_APP.splitlines(keepends=True)[1])
    assert alone.root_cause.rule_id == "xid-cat-ctxsw-timeout"
    assert alone.action.kind is ActionKind.ISOLATE_AND_RESTART


def test_xid_ignore_bucket_is_never_the_cause():
    log = ("[  801.002] NVRM: Xid (PCI:0000:3b:00): 93, pid='<unknown>', name=<unknown>, InfoROM erase limit exceeded\n"
           "RuntimeError: CUDA error: too many resources requested for launch\n")
    d = _diagnose(log)
    assert d.root_cause.rule_id == "cuda-cat-software"
    assert {c.rule_id: c.role for c in d.co_occurring}.get("xid-cat-ignore") == "symptom"
    alone = _diagnose(log.splitlines(keepends=True)[0])
    assert alone.root_cause.rule_id == "xid-cat-ignore" and alone.action.kind is ActionKind.INVESTIGATE


def test_xid_restart_app_bucket_retries():
    d = _diagnose(XID_DMESG_CE)
    assert d.root_cause.rule_id == "xid-cat-restart-app"
    assert d.action.kind is ActionKind.RETRY


@pytest.mark.parametrize(("log", "rule_id", "etype", "action"), [
    ("step 100 loss 2.0\nJobId=123456 JobName=train UserId=alice(1001) JobState=NODE_FAIL Reason=NodeDown\n",
     "slurm-node-fail-state", ErrorType.NodeFailure, ActionKind.ISOLATE_AND_RESTART),
    ("step 100 loss 2.0\n=>> PBS: job killed: node 18 (n314) requested job terminate, 'EOF' (code 1099) - received "
     "SISTER_EOF attempting to communicate with sister MOM's\nmpirun: Forwarding signal 10 to job\n",
     "pbs-sister-node-lost", ErrorType.NodeFailure, ActionKind.ISOLATE_AND_RESTART),
    ("Events:\n  Warning  NodeNotReady  5m  node-controller  Node gpu-node-3 status is now: NodeNotReady\n",
     "k8s-node-lost", ErrorType.NodeFailure, ActionKind.ISOLATE_AND_RESTART),
    ("Status:         Failed\nReason:         Terminated\nMessage:        Pod was terminated in response to imminent node shutdown.\n",
     "k8s-node-shutdown-preempted", ErrorType.NodeFailure, ActionKind.RETRY),
    ("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task. The actor is dead because "
     "its node has died. Node Id: 56b97436e67393f15565e024278867700c2bd0ec6ca9e0dac7261fd1\n",
     "ray-node-died", ErrorType.NodeFailure, ActionKind.ISOLATE_AND_RESTART),
    ("(raylet) A worker died or was killed while executing a task by an unexpected system error. Worker exit type: "
     "SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file.\n",
     "ray-worker-oom", ErrorType.HostOOMKilled, ActionKind.NO_RETRY),
    ("WARNING:torch.distributed.elastic.rendezvous.dynamic_rendezvous:The node 'n2_1234_0' has failed to send a "
     "keep-alive heartbeat to the rendezvous 'job42' due to an error of type RendezvousConnectionError.\n",
     "elastic-rendezvous-keepalive-lost", ErrorType.NodeFailure, ActionKind.ISOLATE_AND_RESTART),
])
def test_node_loss_from_each_scheduler(log, rule_id, etype, action):
    d = _diagnose(log)
    assert (d.root_cause.rule_id, d.root_cause.error_type, d.action.kind) == (rule_id, etype, action)


def test_elastic_and_slurm_reactions_are_symptoms_of_the_worker_error():
    log = ("[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
           "[default] Worker group FAILED. 3/3 attempts left; will restart worker group\n"
           "slurmstepd: error: *** STEP 4242.0 ON gpu-a17 CANCELLED AT 2025-01-10T03:12:55 DUE TO TASK FAILURE ***\n")
    d = _diagnose(log)
    assert d.root_cause.rule_id == "cuda-illegal-memory-access"
    roles = {c.rule_id: c.role for c in d.co_occurring}
    assert roles.get("elastic-worker-group-failed") == "symptom"
    assert roles.get("slurm-cancelled-task-failure") == "symptom"


@pytest.mark.parametrize(("line", "rule_id", "action"), [
    ('botocore.exceptions.EndpointConnectionError: Could not connect to the endpoint URL: "https://b.s3.us-east-1.amazonaws.com/ckpt/x"',
     "objstore-connection-lost", ActionKind.RETRY),
    ("urllib3.exceptions.MaxRetryError: HTTPSConnectionPool(host='storage.googleapis.com', port=443): Max retries exceeded "
     "with url: /upload/storage/v1/b/ckpt/o (Caused by ProtocolError('Connection aborted.'))",
     "objstore-connection-lost", ActionKind.RETRY),
    ("minio.error.S3Error: S3 operation failed; code: SlowDownWrite, message: Resource requested is unwritable, please reduce your request rate",
     "objstore-throttled-or-unavailable", ActionKind.RETRY),
    ("google.api_core.exceptions.Forbidden: 403 POST https://storage.googleapis.com/upload/storage/v1/b/ckpt/o: "
     "sa@p.iam.gserviceaccount.com does not have storage.objects.create access to the Google Cloud Storage object.",
     "objstore-client-config", ActionKind.NO_RETRY),
])
def test_object_store_clients(line, rule_id, action):
    d = _diagnose(f"step 2000 loss 1.7\nsaving checkpoint to s3\n{line}\n")
    assert d.root_cause.error_type is ErrorType.S3StorageError
    assert (d.root_cause.rule_id, d.action.kind) == (rule_id, action)


@pytest.mark.parametrize(("line", "rule_id"), [
    ("OSError: [Errno 107] Transport endpoint is not connected: '/mnt/gcs/dataset/shard-00042.parquet'", "fs-mount-disconnected"),
    ("Jan 10 03:12:55 node7 mmfs[4221]: [E] This node has been expelled from cluster gpfs1 by node nsd01", "fs-client-lost"),
    ("Jan 10 03:12:55 node7 kernel: libceph: mds0 10.0.0.5:6800 socket closed (con state OPEN)", "fs-client-lost"),
])
def test_shared_filesystem_clients(line, rule_id, ablate):
    d = _diagnose(f"step 10 loss 2.0\n{line}\n")
    assert (d.root_cause.rule_id, d.root_cause.error_type, d.action.kind) == (rule_id, ErrorType.StorageError, ActionKind.RETRY)
    assert _ablated(f"step 10 loss 2.0\n{line}\n", ablate).root_cause.rule_id != rule_id


def test_rules_dir_constant_points_at_the_shipped_library():
    assert (DEFAULT_RULES_DIR / "catalog_nccl.yaml").is_file()


# ---- UCX (Open MPI's pml ucx, MPI-launched Horovod) and the OFI plugin (aws-ofi-nccl) ---------

UCX_RETRY_EXCEEDED = """\
[1,0]<stdout>:Epoch 3, step 1200, loss 2.113
[g07r1n14:27251:0:27251] ib_mlx5_log.c:143  Transport retry count exceeded on mlx5_0:1/IB (synd 0x15 vend 0x81 hw_synd 0/0)
[g07r1n14:27251:0:27251] ib_mlx5_log.c:143  DCI QP 0x1d8f7 wqe[2033]: SEND s-e [inl len 26]
==== backtrace (tid:  27251) ====
 0  /usr/lib/libucs.so.0(ucs_handle_error+0x2a4) [0x2b2f1a3f9a44]
"""

UCX_LOCAL_PROTECTION = """\
mpirun -np 16 --mca pml ucx -x UCX_TLS=rc,cuda_copy python train.py
[gpu-12:4411:0:4411] ib_mlx5_log.c:171  Local protection on mlx5_2:1/IB (synd 0x4 vend 0x33 hw_synd 0/0)
[gpu-12:4411:0:4411] ib_mlx5_log.c:171  WR flushed because QP in error state on mlx5_2:1/IB (synd 0x5 vend 0xf9 hw_synd 0/0)
"""

OFI_AV = """\
[1,23]<stdout>:ip-172-32-45-165:72593:73427 [7] NCCL INFO NET/OFI Selected Provider is efa
[1,23]<stdout>:ip-172-32-45-165:72593:73427 [7] create_nccl_ofi_component:459 NCCL WARN NET/OFI Couldn't open AV. RC: -22, ERROR: Invalid argument
[1,23]<stdout>:ip-172-32-45-165:72593:73427 [7] NCCL INFO net.cc:212 -> 2
"""


def test_ucx_transport_timeout_is_a_retried_network_cause(ablate):
    d = _diagnose(UCX_RETRY_EXCEEDED)
    assert (d.root_cause.error_type, d.action.kind) == (ErrorType.NetworkError, ActionKind.RETRY)
    assert d.root_cause.rule_id == "ucx-cqe-peer-unreachable"
    assert _ablated(UCX_RETRY_EXCEEDED, ablate).root_cause.rule_id != "ucx-cqe-peer-unreachable"


def test_ucx_refused_work_request_is_the_set_up_and_not_the_flush_after_it():
    d = _diagnose(UCX_LOCAL_PROTECTION)
    assert (d.root_cause.error_type, d.action.kind) == (ErrorType.NetworkError, ActionKind.NO_RETRY)
    assert d.root_cause.rule_id == "ucx-cqe-bad-request"


def test_ofi_plugin_set_up_failure_is_not_retried(ablate):
    d = _diagnose(OFI_AV)
    assert (d.root_cause.error_type, d.action.kind) == (ErrorType.NetworkError, ActionKind.NO_RETRY)
    assert d.root_cause.rule_id == "ofi-setup-failure"
    assert _ablated(OFI_AV, ablate).root_cause.rule_id != "ofi-setup-failure"


# ---- Ascend NPUs: torch_npu and MindSpore print the CANN runtime's codes -------------------------

TORCH_NPU_STREAM_TIMEOUT = """\
W NPUStream.cpp:409] Warning: NPU warning, error code is 507046[Error]:
[Error]: In the specified timeout waiting event, all tasks in the specified stream are not completed.
EE1002: 2024-09-03-16:50:00.041.231 Stream synchronize timeout. rtDeviceSynchronize execute failed, reason=[stream sync timeout]
"""

MINDSPORE_AICORE = """\
[ERROR] DEVICE(1932,ffff,python):2025-01-10-10:00:00.000.000 [mindspore/ccsrc/plugin/device/ascend/hal/device/ascend_kernel_runtime.cc:600] TaskFailCallback] Execute TaskFailCallback failed.
EZ9999: Inner Error!
EZ9999  Kernel task happen error, retCode=0x26, [aicore exception].[FUNC:PreCheckTaskErr][FILE:task_info.cc][LINE:1518]
"""

TORCH_NPU_HBM_ECC = """\
[E NPUStream.cpp:201] NPU error, error code is 507054[Error]: hbm Multi-bit ECC error.
RuntimeError: ACL stream synchronize failed, error code:507054
"""


def test_ascend_runtime_codes_are_typed_by_class(ablate):
    d = _diagnose(TORCH_NPU_STREAM_TIMEOUT)
    # a device wait timeout is the NPU's collective timeout; nothing shows training ran before it
    assert (d.root_cause.error_type, d.action.kind) == (ErrorType.NCCLTimeoutError, ActionKind.INVESTIGATE)
    assert _ablated(TORCH_NPU_STREAM_TIMEOUT, ablate).root_cause.rule_id != "ascend-collective-wait-timeout"
    d = _diagnose(MINDSPORE_AICORE)
    assert (d.root_cause.error_type, d.action.kind) == (ErrorType.CUDAError, ActionKind.INVESTIGATE)
    d = _diagnose(TORCH_NPU_HBM_ECC)
    assert (d.root_cause.error_type, d.action.kind) == (ErrorType.ECCError, ActionKind.ISOLATE_AND_RESTART)


ASCEND_OP_NO_BINARY = """\
[E OpParamMaker.cpp:273] call aclnnCast failed, detail:EZ9999: Inner Error!
EZ9999: 2024-05-17-01:30:26.960.959  Op Cast does not has any binary.
[ERROR] 2024-05-17-01:30:26 (PID:41961, Device:0, RankID:-1) ERR01005 OPS internal error
"""

MINDSPORE_AICPU = """\
[ERROR] DEVICE(44814,7f33,python):2023-06-01-22:47:58.744.915 [mindspore/ccsrc/plugin/device/ascend/hal/hardware/ascend_graph_executor.cc:195] RunGraph] run task error!
E39999: Inner Error!
E39999  Aicpu kernel execute failed, device_id=0, stream_id=12, task_id=2.[FUNC:PrintAicpuErrorInfo][FILE:task.cc][LINE:747]
"""


def test_an_operator_with_no_kernel_for_the_npu_is_the_install_and_an_ai_cpu_fault_a_kernel_fault():
    d = _diagnose(ASCEND_OP_NO_BINARY)
    assert (d.root_cause.error_type, d.action.kind) == (ErrorType.CUDAError, ActionKind.NO_RETRY)
    assert d.root_cause.rule_id == "ascend-op-no-binary"
    d = _diagnose(MINDSPORE_AICPU)
    assert (d.root_cause.rule_id, d.action.kind) == ("ascend-kernel-exception", ActionKind.INVESTIGATE)


# ---- oneCCL: the ATL/OFI transport could not open a provider --------------------------------------

ONECCL_NO_PROVIDER = """\
2025:05:23-19:04:20:(168955) |CCL_ERROR| atl_ofi_helper.cpp:1635 atl_ofi_open_nw_provs: can not open network providers
2025:05:23-19:04:20:(168955) |CCL_ERROR| atl_ofi.cpp:1149 open_providers: atl_ofi_open_nw_provs failed with status: 1
2025:05:23-19:04:20:(168955) |CCL_ERROR| atl_ofi.cpp:237 init: can't find suitable provider
[hedp017:168955:0:168955] Caught signal 11 (Segmentation fault: address not mapped to object at address 0x8)
"""


def test_a_oneccl_transport_that_found_no_provider_is_the_network_set_up_not_the_crash_after_it(ablate):
    d = _diagnose(ONECCL_NO_PROVIDER)
    assert (d.root_cause.error_type, d.action.kind) == (ErrorType.NetworkError, ActionKind.NO_RETRY)
    assert d.root_cause.rule_id == "oneccl-ofi-provider-setup"
    assert _ablated(ONECCL_NO_PROVIDER, ablate).root_cause.rule_id != "oneccl-ofi-provider-setup"
    # its warning that the providers with device-memory support are missing is no failure
    warn = "2025:05:23-19:04:20:(168955) |CCL_WARN| atl_ofi.cpp:161 init: can not open network providers with hmem support\n"
    assert _diagnose(warn).root_cause.error_type == ErrorType.Unknown


NIC_ATTRIBUTE_MISSING = """\
worker-0:441:441 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.5<0>
worker-0:441:502 [0] graph/xml.h:101 NCCL WARN Attribute busid of node nic not found
worker-0:441:502 [0] NCCL INFO graph/topo.cc:585 -> 3
worker-0:441:502 [0] NCCL INFO init.cc:1012 -> 3
Traceback (most recent call last):
  File "train.py", line 40, in <module>
    dist.all_reduce(t)
torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, internal error - please report this issue to the NCCL developers, NCCL version 2.21.5
ncclInternalError: Internal check failed.
Last error:
Attribute busid of node nic not found
"""


def test_a_nic_the_topology_cannot_place_is_the_hosts_network_set_up(ablate):
    # NCCL's topology XML without a NIC's bus id (a virtual NIC in a VM or container): the
    # internal error that carries it is its wrapper; a CPU node's missing field is no NIC's
    d = _diagnose(NIC_ATTRIBUTE_MISSING)
    assert (d.root_cause.error_type, d.action.kind) == (ErrorType.NetworkError, ActionKind.NO_RETRY)
    assert d.root_cause.rule_id == "nccl-cat-topology-nic-attribute"
    assert _ablated(NIC_ATTRIBUTE_MISSING, ablate).root_cause.rule_id != "nccl-cat-topology-nic-attribute"
    cpu = NIC_ATTRIBUTE_MISSING.replace("busid of node nic", "arch of node cpu")
    assert _diagnose(cpu).root_cause.rule_id != "nccl-cat-topology-nic-attribute"


UCX_CQ_REFUSED = """\
[1732873720.102385] [<hostname>:889102:0]        ib_iface.c:1138 UCX  ERROR ibv_create_cq(cqe=256) failed: Connection timed out
Abort(675407631) on node 0: Fatal error in internal_Init: Other MPI error, error stack:
internal_Init(48301)..........: MPI_Init(argc=(nil), argv=(nil)) failed
MPIDI_UCX_init_world(260).....:
init_worker(38)...............:  ucx function returned with failed status(ucx_init.c 38 init_worker Input/output error)
"""


def test_an_hca_that_refused_a_completion_queue_is_the_network_not_the_io_error_status_it_returns(ablate):
    # UCX returns UCS_ERR_IO_ERROR, whose string "Input/output error" the MPI library prints
    d = _diagnose(UCX_CQ_REFUSED)
    assert (d.root_cause.error_type, d.root_cause.rule_id) == (ErrorType.NetworkError, "ucx-ib-resource-create-failed")
    assert _ablated(UCX_CQ_REFUSED, ablate).root_cause.error_type == ErrorType.StorageError
