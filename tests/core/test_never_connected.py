"""A job whose processes never met (a client could not reach the rendezvous endpoint before any
training) investigates: a wrong address or port, a firewall or the wrong interface of a multi-NIC
host fails the same way on restart. The same connection lost after training ran stays a retry.
An address no host has (0.0.0.0/8: a host name of digits only read as an IPv4 number) is the
set-up, no_retry."""

from __future__ import annotations

import io

import pytest

from app.core.pipeline import Pipeline


@pytest.fixture(scope="module")
def pipe():
    return Pipeline()


def _diagnose(pipe, lines: list[str]):  # noqa: ANN001
    return pipe.diagnose(io.BytesIO(("\n".join(lines) + "\n").encode())).diagnosis


STEPS = [f"{{'loss': {2 - i / 100:.4f}, 'grad_norm': 1.2, 'learning_rate': 2e-05, 'epoch': {i / 100:.2f}}}"
         for i in range(1, 30)]

# torch 2.x (c10d socket), torch 1.x (TCPStore's own timeout, a socket call's strerror), elastic agent
NEVER_MET = {
    "c10d-socket": ["[W socket.cpp:601] [c10d] The client socket has timed out after 60s while trying to connect "
                    "to (10.1.2.3, 29500).",
                    "torch.distributed.DistNetworkError: The client socket has timed out after 60s while trying to "
                    "connect to (10.1.2.3, 29500)."],
    "tcpstore-1x": ["Traceback (most recent call last):", '  File "train.py", line 12, in <module>',
                    "    dist.init_process_group('nccl')",
                    "RuntimeError: connect() timed out. Original timeout was 60000 ms."],
    "store-reset-1x": ["Traceback (most recent call last):", '  File "train.py", line 40, in <module>',
                       "    dist.barrier()", "RuntimeError: Connection reset by peer"],
    "elastic": ["torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d "
                "store has failed. See inner exception for details."],
}


@pytest.mark.parametrize("lines", list(NEVER_MET.values()), ids=list(NEVER_MET))
def test_a_job_that_never_met_investigates(pipe, lines):
    d = _diagnose(pipe, ["Loading checkpoint shards: 100%|##########| 2/2", *lines])
    assert (d.root_cause.error_type, d.action.kind) == ("NetworkError", "investigate"), d.action.reason
    assert "never met" in d.action.reason


@pytest.mark.parametrize("lines", list(NEVER_MET.values()), ids=list(NEVER_MET))
def test_the_same_error_after_training_ran_retries(pipe, lines):
    d = _diagnose(pipe, STEPS + lines)
    assert (d.root_cause.error_type, d.action.kind) == ("NetworkError", "retry"), d.action.reason


def test_a_socket_message_inside_a_longer_runtime_error_is_not_a_network_error(pipe):
    d = _diagnose(pipe, ["Traceback (most recent call last):", '  File "x.py", line 3, in <module>',
                         "RuntimeError: Connection reset by peer is not a valid value for --mode"])
    assert d.root_cause.error_type != "NetworkError"


DDP_INIT = ["Traceback (most recent call last):",
            '  File "train.py", line 88, in <module>',
            "    model = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])",
            '  File "/usr/lib/python3/dist-packages/torch/nn/parallel/distributed.py", line 496, in __init__',
            "    dist._verify_model_across_ranks(self.process_group, parameters)",
            "RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:825, unhandled system error, "
            "NCCL version 2.7.8"]


def test_an_nccl_system_error_while_the_collectives_are_set_up_investigates(pipe):
    d = _diagnose(pipe, DDP_INIT)
    assert (d.root_cause.error_type, d.action.kind) == ("NCCLRemoteError", "investigate"), d.action.reason
    assert "being set up" in d.action.reason


def test_an_nccl_system_error_with_no_context_or_after_training_retries(pipe):
    bare = ["RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:825, unhandled system error, "
            "NCCL version 2.7.8", "ncclSystemError: System call (socket, malloc, munmap, etc) failed."]
    assert _diagnose(pipe, bare).action.kind == "retry"
    assert _diagnose(pipe, STEPS + DDP_INIT).action.kind == "retry"


# NCCL's connect loop at INFO level that never got through: the route, not a transient
ROUTE = ["node2:1183664:1184669 [0] NCCL INFO socketPollConnect: connect returned No route to host, retrying "
         f"({n}/34) after sleep for {n * 100} msec" for n in range(30, 35)]


def test_nccls_own_connect_retries_that_never_got_through_are_set_up_not_transient(pipe):
    assert _diagnose(pipe, ROUTE).action.kind == "no_retry"
    # the same notices after training ran: a route lost mid-run, retried
    assert _diagnose(pipe, STEPS + ROUTE).action.kind == "retry"


LOOPBACK = {
    "nccl": ["host-a:2494:2756 [1] NCCL INFO NET : Using interface lo:127.0.0.1<0>",
             "host-a:4153:4209 [1] include/socket.h:361 NCCL WARN Call to connect timeout : Connection refused"],
    "gloo": ["[rank8] Warning: Unable to resolve hostname to a (local) address. Using the loopback",
             "        address as fallback. Manually set the network interface with GLOO_SOCKET_IFNAME",
             "[rank8] Gloo connectFullMesh failed ... timed out connecting: SO_ERROR: Connection refused,",
             "        remote=[127.0.0.1]:14215"],
}


@pytest.mark.parametrize("name", sorted(LOOPBACK))
def test_a_refused_connect_on_a_loopback_interface_is_set_up(pipe, name):
    lines = LOOPBACK[name]
    d = _diagnose(pipe, lines)
    assert (d.root_cause.error_type, d.action.kind) == ("NetworkError", "no_retry")
    # without the loopback line NCCL's refused connect is the peer process's: retried; Gloo connects
    # its full mesh only when the group is created, so its failed connect is set-up either way
    d = _diagnose(pipe, [line for line in lines if "lo:127" not in line and "loopback" not in line.lower()])
    assert (d.action.kind == "no_retry") is (name == "gloo")


@pytest.mark.parametrize("addr, kind", [("172.17.0.9", "no_retry"), ("10.1.2.3", "investigate")])
def test_a_rendezvous_client_dialling_dockers_default_bridge_is_the_interface(pipe, addr, kind):
    # a container's address on docker's default bridge is reachable from its own host only: the
    # store was advertised on the wrong interface, whatever timed out; another address is the
    # never-met case, investigated
    lines = [f"[E616 02:08:15.931416442 socket.cpp:1023] [c10d] The client socket has timed out after 600000ms "
             f"while trying to connect to ({addr}, 50437).",
             f"torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while trying to "
             f"connect to ({addr}, 50437)."]
    d = _diagnose(pipe, lines)
    assert (d.root_cause.error_type, d.action.kind) == ("NetworkError", kind)
    # after training ran the same timeout is a peer lost mid-run, whatever the address
    assert _diagnose(pipe, STEPS + lines).action.kind == "retry"


def test_open_mpi_connecting_to_the_docker_gateway_is_the_interface(pipe):
    line = ("[u10-154-66-206][[38971,1],2][btl_tcp_endpoint.c:796:mca_btl_tcp_endpoint_complete_connect] "
            "connect() to {} failed: Connection refused (111)")
    assert _diagnose(pipe, [line.format("172.17.0.1")]).action.kind == "no_retry"
    # a refused connect to a routable address is the peer process's: retried
    assert _diagnose(pipe, [line.format("10.0.0.5")]).action.kind == "retry"


OMPI_CONNECT_HELP = [
    "--------------------------------------------------------------------------",
    "WARNING: Open MPI failed to TCP connect to a peer MPI process.  This",
    "should not happen.",
    "",
    "Your Open MPI job may now hang or fail.",
    "",
    "  Local host: node-a",
    "  PID:        4242",
    "  Message:    connect() to 10.0.0.5:1024 failed",
    "  Error:      Operation now in progress (115)",
    "--------------------------------------------------------------------------",
]


def test_open_mpis_help_text_for_a_tcp_connect_that_failed_before_training_is_set_up(pipe):
    d = _diagnose(pipe, OMPI_CONNECT_HELP)
    assert (d.root_cause.error_type, d.action.kind) == ("NetworkError", "no_retry")
    # after training ran the same connect is a peer lost mid-run: retried
    assert _diagnose(pipe, STEPS + OMPI_CONNECT_HELP).action.kind == "retry"


@pytest.mark.parametrize("addr, kind", [
    ("[::ffff:0.0.0.5]:40323", "no_retry"),  # master host name `05`, read as an IPv4 number
    ("0.104.99.143:47389", "no_retry"),  # `6841231`
    ("10.1.2.3:29500", "investigate"),  # a real address: the rendezvous was not reached
])
def test_a_rendezvous_client_dialling_an_address_of_this_network_is_a_numeric_host_name(pipe, addr, kind):
    d = _diagnose(pipe, [f"[W socket.cpp:558] [c10d] The client socket has failed to connect to {addr} "
                         "(errno: 110 - Connection timed out)."] * 2 + [
        "torch.distributed.DistNetworkError: The client socket has failed to connect to any network address of "
        "(master, 40323)."])
    assert d.root_cause.error_type.value == "NetworkError"
    assert d.action.kind.value == kind
