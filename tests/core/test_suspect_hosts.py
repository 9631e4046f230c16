"""Where an infrastructure fault lies: the hosts a message names as the fault's place (a transport
error's remote peer, a node a scheduler, Kubernetes or Ray reports lost, each host of a Slurm host
list) come before the host that printed the line, for any action of an infrastructure root cause;
a script error names no host to suspect."""

from __future__ import annotations

import io

import pytest

from app.core import ablation
from app.core.fields import host_match, located_hosts
from app.core.hostlist import expand_or_keep
from app.core.pipeline import Pipeline


@pytest.mark.parametrize("text, hosts", [
    # NCCL's IB transport (net_ib.cc) and vendor plugins name the completion's remote side
    ("node-a:24141:24296 [2] ib_plugin.c:978 NCCL WARN NET/IB : Got completion from peer 10.226.98.98<48598> "
     "with error 12, opcode 0, len 0, vendor err 129", ["10.226.98.98"]),
    ("gpu3:1:2 [0] transport/net_ib.cc:1696 NCCL WARN NET/IB: Got completion from peer 10.0.1.23<34696> with "
     "status=5 opcode=0 len=0 vendor err 249 (Recv) hca ibp152s0", ["10.0.1.23"]),
    # socket transport: the peer that closed the connection
    ("gpu1:9:9 [0] NCCL WARN socketProgress: Connection closed by remote peer gpu-node-12<51234>", ["gpu-node-12"]),
    # Gloo brackets the peer's address
    ("RuntimeError: [../gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.244.48.107]:12717",
     ["10.244.48.107"]),
    # Slurm: salloc/srun node failure, slurmctld's host lists
    ("salloc: error: Node failure on worker-1", ["worker-1"]),
    ("srun: error: Node failure on gpu[01-03,07]", ["gpu01", "gpu02", "gpu03", "gpu07"]),
    ("slurmctld: error: Nodes node[3-4] not responding", ["node3", "node4"]),
    # slurmstepd's cancel banner names the batch host that printed it, a survivor of a node failure
    ("slurmstepd: error: *** JOB 162 ON gpu-7 CANCELLED AT 2019-12-29T05:31:10 DUE TO NODE FAILURE, "
     "SEE SLURMCTLD LOG FOR DETAILS ***", []),
    # Kubernetes events
    ("Warning  NodeNotReady  pod/trainer-0  Node gpu-node-7 is not ready", ["gpu-node-7"]),
    ("The node was low on resource: memory. Pod was evicted from node gpu-node-9", ["gpu-node-9"]),
    # Ray: the owner's node, a node the GCS marked dead
    ("The actor is dead because its owner has died. Owner Id: 0100 Owner Ip address: 172.21.160.9 Owner worker "
     "exit type: SYSTEM_ERROR Worker exit detail: Owner's node has crashed.", ["172.21.160.9"]),
    ("The node with node id: 5f1c and address: 10.0.0.9 and node name: 10.0.0.9 has been marked dead because "
     "the detector has missed too many heartbeats from it.", ["10.0.0.9"]),
    # Ray's worker on a raylet that went away names that node
    ("2022-11-02 02:42:14,808 WARNING worker.py:1849 -- Raylet is terminated: ip=172.29.58.133, id=6ad361c6d67a. "
     "Termination is unexpected.", ["172.29.58.133"]),
    # lines that name no place of a fault
    ("step 120 | loss 3.2 | node 4 of 8", []),
    ("Epoch 3 on node training set", []),
    ("RuntimeError: NCCL error: remote process exited or there was a network error", []),
    # a socket library's check that names the other end (PaddlePaddle's SocketChannel)
    ("F0308 17:17:08.399897 46342 SocketChannel.cpp:54] Check failed: len >= 0  peer=10.89.199.23: Connection reset "
     "by peer [104]", ["10.89.199.23"]),
    # NCCL socket.cc names the other end as ip<port>
    ("[15]worker-23:83:2526 [0] misc/socket.cc:503 NCCL WARN Net : Call to recv from 100.96.188.199<41468> failed : "
     "Connection timed out", ["100.96.188.199"]),
    ("node-1:5:5 [0] NCCL WARN NET/Socket : Connect to 10.1.2.3<43215> failed : No route to host", ["10.1.2.3"]),
])
def test_located_hosts(text: str, hosts: list[str]) -> None:
    assert located_hosts(text) == hosts


@pytest.mark.parametrize("token, hosts", [
    ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
    ("gpu[8-10]-ib", ["gpu8-ib", "gpu9-ib", "gpu10-ib"]),
    ("plain-host", ["plain-host"]),
    ("node[5-2]", ["node[5-2]"]),            # a range backwards is not a host list
    ("node[1-999999]", ["node[1-999999]"]),  # nor one of a million hosts
])
def test_expand_or_keep(token: str, hosts: list[str]) -> None:
    assert expand_or_keep(token) == hosts


def test_nccl_host_behind_a_bracketed_timestamp() -> None:
    m = host_match("[2025-10-13 10:12:54] iv-ydin754:1458548:1480527 [0] misc/ibvwrap.cc:182 NCCL WARN Call to "
                   "ibv_reg_mr_iova2 failed with error Invalid argument")
    assert m is not None and m.group(1) == "iv-ydin754"


def _diagnose(text: str):
    return Pipeline().diagnose(io.BytesIO(text.encode()))


TRAIN = [f"[rank0]: iteration {s}/1000 | lm loss: 3.{s:03d} | grad norm: 1.2 |" for s in range(1, 30)]

IB_PEER = TRAIN + [
    "node-a:24141:24296 [2] ib_plugin.c:978 NCCL WARN NET/IB : Got completion from peer 10.226.98.98<48598> "
    "with error 12, opcode 0, len 0, vendor err 129",
    "node-a:24141:24296 [2] NCCL INFO transport/net_ib.cc:1096 -> 6",
    "[rank2]: RuntimeError: NCCL communicator was aborted on rank 2.",
]


def test_transport_error_names_its_peer_first_whatever_the_action() -> None:
    d = _diagnose("\n".join(IB_PEER) + "\n").diagnosis
    assert d.root_cause.category.value == "infrastructure"
    assert d.action.suspect_hosts[:2] == ["10.226.98.98", "node-a"]


def test_a_gpu_error_of_another_class_still_names_where_it_was_seen() -> None:
    """A CUDA argument error from NCCL's own calls is investigated, not an infrastructure fault,
    but the host that printed it is where the engineer looks first."""
    lines = TRAIN + ["gpu-07:3070:3090 [0] include/shm.h:42 NCCL WARN Cuda failure 'invalid argument'",
                     "[rank3]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
                     "unhandled cuda error"]
    d = _diagnose("\n".join(lines) + "\n").diagnosis
    assert (d.root_cause.error_type.value, d.action.kind.value) == ("CUDAError", "investigate")
    assert d.root_cause.category.value != "infrastructure" and d.action.suspect_hosts == ["gpu-07"]


def test_a_placeholder_host_name_falls_back_to_the_rays_prefix() -> None:
    """rdma-core's mlx5 provider prints `host_unknown` when it cannot tell its host name."""
    lines = TRAIN + ["(LLMRayActor pid=90738, ip=172.19.24.110) mlx5: host_unknown: got completion with error:",
                     "(LLMRayActor pid=90738, ip=172.19.24.110) 00000000 00000000 00000000 00000000"]
    d = _diagnose("\n".join(lines) + "\n").diagnosis
    assert d.root_cause.error_type.value == "NetworkError"
    assert d.action.suspect_hosts == ["172.19.24.110"]


def test_script_error_names_no_suspect_host() -> None:
    lines = TRAIN + ["node-a: Traceback (most recent call last):",
                     'node-a:   File "train.py", line 10, in <module>',
                     "node-a: KeyError: 'input_ids'"]
    d = _diagnose("\n".join(lines) + "\n").diagnosis
    assert d.root_cause.error_type.value == "KeyError"
    assert d.action.suspect_hosts == []


def test_ablated_hosts_name_only_an_isolates_printing_hosts(monkeypatch) -> None:
    monkeypatch.setenv("LOGDX_ABLATE", "hosts")
    ablation._off.cache_clear()
    try:
        d = _diagnose("\n".join(IB_PEER) + "\n").diagnosis
        if d.action.kind.value != "isolate_and_restart":
            assert d.action.suspect_hosts == []
    finally:
        monkeypatch.delenv("LOGDX_ABLATE")
        ablation._off.cache_clear()


def test_a_timeout_every_host_printed_names_none_of_them() -> None:
    lines = TRAIN + [f"node-{h}:1:{r} [0] NCCL WARN NET/Socket : socket recv timeout, rank {r}" for h in range(4)
                     for r in (2 * h, 2 * h + 1)]
    lines += [f"[rank{r}]:[E ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective operation timeout: "
              "WorkNCCL(SeqNum=9, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600060 milliseconds before timing out."
              for r in range(8)]
    d = _diagnose("\n".join(lines) + "\n").diagnosis
    assert d.action.kind.value != "isolate_and_restart"
    assert d.action.suspect_hosts == []


def test_a_symptom_with_no_host_takes_the_peer_its_neighbour_names() -> None:
    lines = TRAIN + [
        "50428e4af543:34610:36821 [4] ib_plugin.c:1673 NCCL WARN NET/IB: Got completion from peer 10.0.1.23<34696> "
        "with status=5 opcode=0 len=0 vendor err 249 (Recv) hca ibp152s0",
        "[rank4]:[E1229 16:47:25.333820755 ProcessGroupNCCL.cpp:541] [Rank 4] found async exception when checking "
        "for NCCL errors: NCCL error: remote process exited or there was a network error, NCCL version 2.21.5",
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
    ]
    d = _diagnose("\n".join(lines) + "\n").diagnosis
    assert d.action.suspect_hosts[:1] == ["10.0.1.23"]


def test_a_set_up_error_under_nccls_last_error_is_the_cause_not_a_peers_consequence() -> None:
    """NCCL prints the specific reason of a generic error under `Last error:`; a set-up error there
    (no usable interface) is not something a peer's death causes."""
    lines = ["RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:2897, invalid usage (run with NCCL_DEBUG=WARN for "
             "details), NCCL version 2.27.3", "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
             "Last error:", "Bootstrap : no socket interface found"]
    d = _diagnose("\n".join(lines) + "\n").diagnosis
    assert (d.root_cause.error_type.value, d.action.kind.value) == ("NetworkError", "no_retry")


OMPI_PEER_HUNG_UP = [
    "--------------------------------------------------------------------------",
    "An MPI communication peer process has unexpectedly disconnected.  This",
    "usually indicates a failure in the peer process (e.g., a crash or",
    "otherwise exiting without calling MPI_FINALIZE first).",
    "",
    "  Local host: worker-3",
    "  Local PID:  7720",
    "  Peer host:  worker-6",
    "--------------------------------------------------------------------------",
]


def test_a_help_texts_peer_host_line_names_the_other_end() -> None:
    """Open MPI's help text names the peer under its message, on a `Peer host:` line of its own
    (never the `Local host:`, the side that reports it)."""
    d = _diagnose("\n".join(TRAIN + OMPI_PEER_HUNG_UP) + "\n").diagnosis
    assert d.root_cause.error_type.value == "NetworkError"
    assert d.action.suspect_hosts == ["worker-6"]
    # a line beyond the help text's block names nothing of it
    far = OMPI_PEER_HUNG_UP[:5] + [f"step {i}" for i in range(20)] + OMPI_PEER_HUNG_UP[5:]
    assert _diagnose("\n".join(TRAIN + far) + "\n").diagnosis.action.suspect_hosts == []


HCCL_EXEC_TIMEOUT = [
    "EI0002: [PID: 4410] 2025-03-02-08:12:44.101.220 The wait execution of the Notify register times out. "
    "Reason: The Notify register has not received the Notify record from remote rank [unknown].",
    "there are(is) 1 abnormal device(s):",
    "Cluster Exception Location[IP/ID]:[10.20.3.17/5], Arrival Time:[Sun Mar  2 08:09:50 2025], "
    "Discoverer:[10.20.3.9/0], ExceptionType:[Heartbeat Lost Occurred], Possible Reason:1. Process has exited, "
    "2. Network Disconnected",
]


def test_hccls_cluster_exception_report_names_the_faults_rank() -> None:
    """Ascend HCCL spreads a fault over its cluster heartbeat: the report below an execution
    timeout names the rank where it lies (Location), not the one that noticed it (Discoverer),
    and the run log's HeartbeatAbnormal line its `crimer rank`."""
    d = _diagnose("\n".join(TRAIN + HCCL_EXEC_TIMEOUT) + "\n").diagnosis
    assert d.root_cause.error_type.value == "NCCLTimeoutError"
    assert d.action.suspect_hosts == ["10.20.3.17"]
    assert located_hosts("[HeartbeatAbnormal]local rank [10.20.3.9/0]: crimer rank [10.20.3.17/5] "
                         "status[LOST] by informer rank [10.20.3.11/2]") == ["10.20.3.17"]


OMPI_NO_CONNECT = [
    "--------------------------------------------------------------------------",
    "ORTE is unable to establish a communication connection to the",
    "specified daemon located on the indicated node:",
    "",
    "  my node:   head-1",
    "  target node:  10.0.8.21",
    "",
    "This is usually due to a lack of common network interfaces and/or",
    "no route found between them.",
    "--------------------------------------------------------------------------",
]
OMPI_COMM_PATH_LOST = [
    "--------------------------------------------------------------------------",
    "A critical communication path was lost to:",
    "",
    "  My name:      [[5120,0],0]",
    "  Process name: [[5120,1],12]",
    "  Node:         gpu-node-07",
    "--------------------------------------------------------------------------",
]


def test_the_open_mpi_runtimes_help_texts_name_the_unreachable_node() -> None:
    """The runtime's help texts name the other end under the message: `target node:` (a daemon it
    cannot connect to; `my node:` is the side that reports it) and `Node:` (a rank it lost). A
    connection set-up failure is the hosts' network set-up (no_retry); a path lost mid-run is the
    network to that node (the network policy)."""
    d = _diagnose("\n".join(OMPI_NO_CONNECT) + "\n").diagnosis
    assert (d.root_cause.error_type.value, d.action.kind.value) == ("NetworkError", "no_retry")
    assert d.action.suspect_hosts == ["10.0.8.21"]
    d = _diagnose("\n".join(TRAIN + OMPI_COMM_PATH_LOST) + "\n").diagnosis
    assert (d.root_cause.error_type.value, d.action.kind.value) == ("NetworkError", "retry")
    assert d.action.suspect_hosts == ["gpu-node-07"]


RAY_ACTOR_DIED = [
    "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.",
    "\tclass_name: RayTrainWorker", "\tactor_id: 4473bb2424de8ebfec88acc402000000", "\tpid: 6420",
    "\tnamespace: c53c8492-c985-4b6e-9247-fdf5ea623abd", "\tip: 10.72.56.3",
    "The actor is dead because its node has died. Node Id: 677df2a9020c5db45e755b0078c469e2ce51e05ea09",
]


def test_a_ray_actor_errors_ip_field_names_the_node_that_died() -> None:
    """Ray lists the dead actor's fields (`ip: ...`) just above the line saying its node died."""
    d = _diagnose("\n".join(TRAIN + RAY_ACTOR_DIED) + "\n").diagnosis
    assert (d.root_cause.error_type.value, d.action.kind.value) == ("NodeFailure", "isolate_and_restart")
    assert d.action.suspect_hosts == ["10.72.56.3"]
    # an `ip:` line far above the cause line is not one of its fields
    far = RAY_ACTOR_DIED[:-1] + [f"step {i}" for i in range(10)] + RAY_ACTOR_DIED[-1:]
    assert _diagnose("\n".join(TRAIN + far) + "\n").diagnosis.action.suspect_hosts != ["10.72.56.3"]


def test_only_a_peers_consequence_before_training_is_investigated_not_retried() -> None:
    """A log whose only errors are consequences of another process's failure (a peer closed the
    socket, NCCL's proxy lost its connection), before any training, does not say whether a
    restart would get further: the fault is in the peer's log. Investigate (policies
    network-symptom-only, nccl-remote-symptom-only). After training ran it is a peer lost mid-run:
    retry. With the cause in the log, the cause decides."""
    closed = ["node-1:3358:13338 [2] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer "
              "node-4<46494>"]
    d = _diagnose("\n".join(closed) + "\n").diagnosis
    assert (d.root_cause.error_type.value, d.action.kind.value) == ("NetworkError", "investigate")
    assert d.action.suspect_hosts[:1] == ["node-4"]  # where to read next
    assert _diagnose("\n".join(TRAIN + closed) + "\n").diagnosis.action.kind.value == "retry"
    oom = ["[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]
    d = _diagnose("\n".join(oom + closed) + "\n").diagnosis
    assert (d.root_cause.error_type.value, d.action.kind.value) == ("OutOfMemoryError", "no_retry")


def test_a_lost_gpu_named_by_its_bus_id_is_on_the_one_host_that_printed_the_log() -> None:
    """nvidia-smi's "GPU is lost" names the GPU by bus id: a GPU of the host whose output this is
    (its kernel log names it), unlike a node loss, which the survivors report."""
    lines = ["`Unable to determine the device handle for GPU 0000:17:00.0: GPU is lost.  Reboot the system to "
             "recover this GPU`",
             "Aug 26 15:28:16 ailcm-ai1 kernel: [87474.832707] NVRM: GPU at PCI:0000:17:00: GPU-f114b259-1fd6",
             "Aug 26 15:28:16 ailcm-ai1 kernel: [87474.832733] NVRM: GPU Board Serial Number: "]
    d = _diagnose("\n".join(lines) + "\n").diagnosis
    assert (d.root_cause.error_type.value, d.action.kind.value) == ("NodeFailure", "isolate_and_restart")
    assert d.action.suspect_hosts == ["ailcm-ai1"]
    # a node loss (no GPU named) reported in one host's log is not that host's fault
    lost = ["slurmstepd: error: *** JOB 7 ON gpu-7 CANCELLED AT 2019-12-29T05:31:10 DUE TO NODE FAILURE ***",
            "Aug 26 15:28:16 ailcm-ai1 kernel: [87474.832733] NVRM: GPU Board Serial Number: "]
    d = _diagnose("\n".join(lost) + "\n").diagnosis
    assert d.root_cause.error_type.value == "NodeFailure" and "ailcm-ai1" not in d.action.suspect_hosts


def test_a_syslog_prefixed_lost_gpu_keeps_its_bus_id() -> None:
    """The match may not start before the bus id, so a kernel line behind syslog's prefix names
    its GPU as one without it does."""
    for line in ("Jul 14 03:12:55 node-12 kernel: NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
                 "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."):
        d = _diagnose(line + "\n").diagnosis
        assert (d.root_cause.error_type.value, d.root_cause.gpu) == ("NodeFailure", "0000:3b:00.0")
