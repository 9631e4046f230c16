"""Act: map a diagnosis (error type, category, context) to an action, with policies as data.

Policies live in `rules/policies.yaml`. Each names an error type and/or category, optional
conditions (named predicates defined here, checked at rule load) and the action. The first
matching policy wins; a rule-level `action` override on the matched diagnosis rule wins over all.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import regex

from app.core import ablation
from app.core.rules import bounded_match
from app.core.types import ActionKind, Category, ErrorType


@dataclass(frozen=True)
class PolicyContext:
    error_type: ErrorType
    category: Category
    confidence: float
    rule_action: ActionKind | None = None
    rule_id: str | None = None  # the diagnosis rule that found the root cause
    # ranks that reported the event, and the ranks the log shows exist at all
    event_ranks: frozenset[int] = frozenset()
    known_ranks: frozenset[int] = frozenset()
    hosts: tuple[str, ...] = ()
    spike_step_index: int | None = None  # index of the spike in the loss series
    only_symptoms: bool = False
    # text of the lines up to and including the root cause's first line (the last ones kept)
    preceding: tuple[str, ...] = ()
    # the root cause's own lines (its first occurrences)
    root_lines: tuple[str, ...] = ()
    # the log shows training progress (a step or metrics line) before the root cause
    trained_before: bool = False
    # `path:function` of the traceback frames printed above the root cause's exception lines
    root_frames: tuple[str, ...] = ()
    # the log shows the job's communication library bound to an interface no peer can reach
    # (`loopback_interface`, see LOOPBACK_INTERFACE)
    loopback_interface: bool = False
    extra: dict = field(default_factory=dict)


def _silent_ranks(ctx: PolicyContext) -> bool:
    """Some ranks in 0..max(rank) never reported the collective timeout: one of them is stuck."""
    return bool(silent_ranks(ctx))


def silent_ranks(ctx: PolicyContext) -> list[int]:
    """The ranks in 0..max(rank) that did not report the timeout: those the log shows printing
    something else, and the ones it never shows as long as they are fewer than the ranks that
    reported it (one stuck rank among many; a log of one node, ranks 13 and 14 of 15, says nothing
    of the thirteen others)."""
    if len(ctx.event_ranks) < 2:
        return []
    universe = set(range(max(ctx.event_ranks | ctx.known_ranks) + 1))
    missing = universe - ctx.event_ranks
    if len(missing - ctx.known_ranks) >= len(ctx.event_ranks):
        missing &= ctx.known_ranks
    return sorted(missing)


# torch's ProcessGroupNCCL numbers a group's collectives: `WorkNCCL(SeqNum=1, OpType=ALLGATHER ...)`,
# `... watchdog at work: 2, last enqueued NCCL work: 2, last completed NCCL work: 0.`
_SEQNUM = regex.compile(r"\bSeqNum=(\d+)")
_LAST_COMPLETED = regex.compile(r"last completed (?:NCCL )?work: (-?\d+)")
FIRST_COLLECTIVES = 2


def _first_collective(ctx: PolicyContext) -> bool:
    """The timed-out collectives are the process group's first ones (every SeqNum the root cause
    names is at most FIRST_COLLECTIVES, or no work of the group ever completed): the ranks never
    connected, which a restart repeats. A timeout after thousands of collectives is not this."""
    seqs = [int(m.group(1)) for line in ctx.root_lines for m in _SEQNUM.finditer(line)]
    done = [int(m.group(1)) for line in ctx.root_lines for m in _LAST_COMPLETED.finditer(line)]
    if done:
        return max(done) <= 0
    return bool(seqs) and max(seqs) <= FIRST_COLLECTIVES


# torch's WorkNCCL names each timed-out collective: its kind and, from torch 2.2, its size
# (`WorkNCCL(SeqNum=5727, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000)`), and
# torch 2.3+ its process group (`[PG ID 0 PG GUID 0(default_pg) Rank 5]`, `[PG 0 Rank 6]`)
_WORK = regex.compile(r"\bWorkNCCL\(SeqNum=\d+, OpType=(\w+)(?:, NumelIn=(\d+))?")
_PG = regex.compile(r"\[PG (?:ID )?(\d+)\b")
# a flag or a metric (a loss average, a stop signal, a best-loss comparison, a barrier's token)
SCALAR_NUMEL = 4


def _scalar_collective(ctx: PolicyContext) -> bool:
    """Every timed-out collective the root cause sizes carries at most SCALAR_NUMEL elements. A
    gradient or parameter collective carries millions; a collective of one element is where the
    job's own control flow brings the ranks together (averaging a loss, agreeing to stop, saving
    the best model). A timeout there means some ranks were still in the job's own step (saving,
    evaluating, tokenizing) or had run out of data before the others: a restart reaches the same
    point and waits the same way."""
    sizes = [int(m.group(2)) for line in ctx.root_lines for m in _WORK.finditer(line) if m.group(2)]
    return bool(sizes) and max(sizes) <= SCALAR_NUMEL


# torch's WorkNCCL names the deadline the job gave its collectives: `Timeout(ms)=600000`
_TIMEOUT_MS = regex.compile(r"\bTimeout\(ms\)=(\d+)")
# torch's default is 30 min (10 min in some launchers); a deadline of a minute or less is one the
# job chose, shorter than steps that run on one rank while the others wait (a validation pass on
# rank 0, a checkpoint save, the first batch's compilation)
SHORT_TIMEOUT_MS = 60_000


def deadlines_ms(lines) -> list[int]:
    """The collectives' deadlines (`Timeout(ms)=N`) the lines name, in milliseconds."""
    return [int(m.group(1)) for line in lines for m in _TIMEOUT_MS.finditer(line)]


def _short_timeout(ctx: PolicyContext) -> bool:
    """Every deadline the root cause names is at most SHORT_TIMEOUT_MS: the collective waited
    longer than the job allowed, not longer than a healthy fabric takes. A rank busy with the job's
    own step (rank-0 validation, a save) outlasts a one-minute deadline on every run; a restart
    times out at the same point. Raise the timeout (or move the step off the critical path)."""
    limits = deadlines_ms(ctx.root_lines)
    return bool(limits) and max(limits) <= SHORT_TIMEOUT_MS


def _collective_kind(op: str) -> str:
    # ALLGATHER and _ALLGATHER_BASE (or a COALESCED form) are the same NCCL collective
    return op.strip("_").removesuffix("_BASE").removesuffix("_COALESCED").replace("_", "")


def _mismatched_collectives(ctx: PolicyContext) -> bool:
    """Ranks of one process group time out in collectives of different kinds (one in a BROADCAST,
    another in an ALLGATHER): they are not in the same collective, so the job's processes took
    different code paths (a desync: a rank skipped or added a collective). The job's own fault;
    a restart repeats it."""
    kinds: dict[str, set[str]] = {}
    for line in ctx.root_lines:
        pg = m.group(1) if (m := _PG.search(line)) else "?"
        for w in _WORK.finditer(line):
            kinds.setdefault(pg, set()).add(_collective_kind(w.group(1)))
    return any(len(k) > 1 for k in kinds.values())


# a client that could not reach the job's rendezvous endpoint: torch's c10d TCPStore / socket
# (`The client socket has timed out ... trying to connect to`, `failed to connect to`,
# `connect() timed out`, a socket call's strerror), the elastic agent's RendezvousConnectionError.
# Not a rendezvous that timed out waiting for a peer to join (RendezvousTimeoutError, a store
# wait, DistStoreError waiting for clients): the endpoint was reachable and a node came late or
# not at all, which a restart can fix.
_RENDEZVOUS = regex.compile(
    r"(?i)client socket has (?:timed out|failed to connect)|connect\(\) timed out|"
    r"RendezvousConnectionError|connection to the C10d store has failed|"
    r"ssh: connect to host|ssh: Could not resolve hostname|was not reachable via ssh|"
    r"(?:RuntimeError|DistNetworkError): (?:Connection (?:reset by peer|refused|timed out)|No route to host)")


# the job's collective set-up, as a traceback's frames or NCCL's return-code trace show it: DDP's
# constructor (its first broadcast of the parameters), init_process_group, ncclCommInitRank, and
# NCCL's `init.cc:N -> R` (an error returned through the communicator's initialisation)
_SETUP = regex.compile(
    r"distributed\.py\", line \d+, in (?:__init__|_sync_(?:module_states|params_and_buffers)|"
    r"_verify_param_shape_across_processes|_distributed_broadcast_coalesced)\b|in init_process_group\b|"
    r"\bncclCommInitRank(?:Config)?\b|\binit\.cc:\d+ -> \d")

# a Python collective call in the traceback (torch's distributed_c10d, Paddle's collective, Horovod's
# and DeepSpeed's comm wrappers). NCCL reports a failure of a running collective asynchronously
# (torch's watchdog, an async error check), not from the call that launched it; an NCCL error
# raised by the call itself is the communicator's creation, which torch and Paddle do lazily at a
# group's first collective, or the launch.
_COLLECTIVE_FUNC = (r"(?:all_reduce|allreduce|barrier|monitored_barrier|_store_based_barrier|broadcast\w*|"
                    r"_?all_gather\w*|allgather\w*|_?reduce_scatter\w*|all_to_all\w*|alltoall\w*|new_group)")
_COLLECTIVE_CALL = regex.compile(rf"\", line \d+, in {_COLLECTIVE_FUNC}$")
_COLLECTIVE_FRAME = regex.compile(rf":{_COLLECTIVE_FUNC}$")


# NCCL (and the libraries that copy its bootstrap: RCCL, Neuron's CCOM) failing to set up its TCP
# connections: a connect that failed or gave up (a WARN, or NCCL's connect functions' own retry
# notices at INFO level: `socketPollConnect: connect returned No route to host, retrying (34/34)`,
# which are the root cause only when the loop never got through), or a failure the WARN's source file places in
# the bootstrap, or the socket transport's set-up as its return-code trace shows it. A recv or
# send on a connection that had been up is not set-up (a peer lost mid-run), nor are the IB verbs
# transport's completion errors (the fabric's). A refused connect is left out too: the peer's
# host answered and nothing listened, which is the peer process (not started yet, or gone) more
# than the route; a timeout, an unreachable network or an aborted connect is the route.
_SOCKET_SETUP = regex.compile(
    r"\bWARN\b[^\n]*?(?:\bCall to connect\b|\b[Cc]onnect to \S+ failed|\b[Cc]onnect(?: to \S+)? returned\b)|"
    r"\bsocket(?:Start|Poll)Connect\b|\bNCCL INFO Call to connect returned\b|\bbootstrap\.cc?:\d+\b[^\n]*\bWARN\b|"
    r"\bNCCL INFO (?:transport/net(?:_socket)?\.cc|bootstrap\.cc?):\d+ -> 2\b|"
    # MPI's transports wiring up the ranks: Open MPI's TCP BTL connect (btl_tcp_endpoint.c, and
    # the help text it prints for it, help-mpi-btl-tcp.txt [client connect fail]) and UCX's socket
    # connect (ucs/sys/sock.c), both with the socket's errno
    r"\bUnable to connect to the peer \S+ on port \d+:|\bmca_btl_tcp_endpoint_complete_connect\] connect\(\) to\b|"
    r"\bOpen MPI failed to TCP connect to a peer MPI process\b|"
    r"\bUCX\s+ERROR\b[^\n]*?\bconnect\(fd=\d+, dest_addr=")


# An HTTP client's request to a service on the job's own host (urllib3 / requests name the pool's
# host, `HTTPConnectionPool(host='127.0.0.1', port=5000)`; a URL on a loopback address): a server
# the job itself starts or expects beside it (a reward model, an environment server, an inference
# server) that did not answer, not an external service over the network.
_LOCAL_ENDPOINT = regex.compile(
    r"ConnectionPool\(host='(?:127\.\d{1,3}\.\d{1,3}\.\d{1,3}|localhost|0\.0\.0\.0|::1)'|"
    r"\b(?:https?|wss?)://(?:127\.\d{1,3}\.\d{1,3}\.\d{1,3}|localhost|0\.0\.0\.0|\[::1\])[:/]")


# A connect to an IPv4 address in 0.0.0.0/8 other than 0.0.0.0 ("this network", RFC 1122: no host
# has one): what the resolver (inet_aton) makes of a host name of digits only, `05` -> 0.0.0.5,
# `6841231` -> 0.104.99.143; c10d prints it plain or IPv4-mapped (`[::ffff:0.0.0.5]:40323`).
_NUMERIC_HOST_ADDRESS = regex.compile(
    r"\bconnect(?:ing)? to \[?(?:::ffff:)?\(?0\.(?:[1-9]\d{0,2}\.\d{1,3}\.\d{1,3}|0\.[1-9]\d{0,2}\.\d{1,3}|0\.0\.[1-9]\d{0,2})\b")


# The interface a communication library picked for traffic between hosts, when it is one no other
# host can reach: NCCL's `NET/Socket : Using [0]lo:127.0.0.1<0>` / `Bootstrap : Using lo:127.0.0.1`
# (and the older `NET : Using interface lo:127.0.0.1`), a docker bridge (`docker0`, 172.17.0.1) or a
# link-local IPv6 tunnel address (fe80::), a connect to the docker bridge's address, and Gloo's
# `Unable to resolve hostname to a (local) address. Using the loopback address as fallback`.
# Sources: NVIDIA/nccl src/misc/socket.cc (ncclFindInterfaces: "Using %s", interface name and
# address), pytorch/pytorch
# torch/csrc/distributed/c10d/ProcessGroupGloo.cpp (createDefaultDevice's loopback fallback warning).
LOOPBACK_INTERFACE = regex.compile(
    r"\bNCCL INFO (?:NET/Socket|NET|Bootstrap) ?: Using (?:interface )?(?:\[\d+\])?"
    r"(?:lo:127\.|docker\d*:|[\w.-]+:172\.17\.0\.1\b|[\w.-]+:fe80::)"
    r"|\bUnable to resolve hostname to a \(local\) address\. Using the loopback\b"  # (it wraps there)
    # a connect whose destination is docker's default bridge address, which every host has: the
    # peer advertised its docker0 address (UCX's `connect(fd=N, dest_addr=172.17.0.1:P) failed`,
    # Open MPI's TCP BTL `connect() to 172.17.0.1 failed`), or a c10d store client that could not
    # reach a container's address on that bridge (172.17.0.0/16, reachable from its own host only:
    # `trying to connect to (172.17.0.9, 50437)`, `failed to connect/validate to host 172.17.0.9:P`)
    r"|\bdest_addr=172\.17\.0\.1:|\bconnect\(\) to 172\.17\.0\.1 failed\b"
    r"|\[c10d\][^\n]*?\b(?:trying to connect to \(|connect/validate to host )172\.17\.\d+\.\d+\b")


def uses_loopback_interface(texts) -> bool:
    return any(LOOPBACK_INTERFACE.search(t) for t in texts)


def _never_connected(ctx: PolicyContext) -> bool:
    """The job's processes never met, and the log shows no training before the failure: the root
    cause is a failure to reach the rendezvous endpoint (the master's c10d store, the elastic
    rendezvous, a node over the launcher's ssh), or an NCCL system error raised while the
    collectives were being set up (DDP's first broadcast, init_process_group, NCCL's communicator
    init). A wrong address or port, a blocked port, the wrong interface of a multi-NIC host: a
    restart fails the same way. A connection lost after training ran is not this."""
    if ctx.trained_before:
        return False
    if any(_RENDEZVOUS.search(line) for line in ctx.root_lines):
        return True
    # (an NCCL system error there; a rendezvous that timed out waiting for a node that came late
    # also fails inside init_process_group, but its endpoint answered)
    # With no training before it, an NCCL error raised by a collective call is its communicator's
    # creation failing: the group's first collective.
    return ctx.error_type is ErrorType.NCCLRemoteError and (any(
        _SETUP.search(line) or _COLLECTIVE_CALL.search(line.rstrip()) for line in (*ctx.preceding, *ctx.root_lines)
    ) or any(_COLLECTIVE_FRAME.search(f) for f in ctx.root_frames))


# A process group runs some tens of collectives per training step: ten thousand is minutes of
# training, against the hundreds of thousands of a job that ran for hours
EARLY_COLLECTIVES = 10_000


def _early_collective(ctx: PolicyContext) -> bool:
    """The timed-out collective is among the group's first EARLY_COLLECTIVES (the highest SeqNum
    or last completed work the root cause names): the job failed before it reached steady
    training. A transient fabric fault strikes in proportion to running time; a timeout this
    early is more often the job's own (a rank stuck in a code path or its data, ranks that
    disagree on a collective, a set-up problem), which a restart repeats."""
    seqs = [int(m.group(1)) for line in ctx.root_lines for m in _SEQNUM.finditer(line)]
    done = [int(m.group(1)) for line in ctx.root_lines for m in _LAST_COMPLETED.finditer(line)]
    marks = seqs or done
    # a SeqNum counts one process group's collectives: a group used now and then (a pipeline
    # stage's, an evaluation broadcast's) is still low after hours, so training seen before the
    # timeout outranks it
    if ctx.trained_before:
        return False
    # no SeqNum and no training before it (an NPU's stream-sync timeout, an old torch's message):
    # nothing shows the job ever reached steady training either
    return not marks or max(marks) < EARLY_COLLECTIVES


CONDITIONS: dict[str, Callable[[PolicyContext], bool]] = {
    "first_collective": _first_collective,
    "early_collective": _early_collective,
    "never_connected": _never_connected,
    "scalar_collective": _scalar_collective,
    "short_timeout": _short_timeout,
    "mismatched_collectives": _mismatched_collectives,
    "silent_ranks": _silent_ranks,
    "early_in_run": lambda ctx: ctx.spike_step_index is not None and ctx.spike_step_index < 10,
    "low_confidence": lambda ctx: ctx.confidence < 0.4,
    "has_hosts": lambda ctx: bool(ctx.hosts),
    "only_symptoms": lambda ctx: ctx.only_symptoms,
    # the log shows no training step or metric before the root cause (an excerpt may hide one)
    "before_training": lambda ctx: not ctx.trained_before,
    "after_training": lambda ctx: ctx.trained_before,
    "loopback_interface": lambda ctx: ctx.loopback_interface,
    "local_endpoint": lambda ctx: any(_LOCAL_ENDPOINT.search(line) for line in ctx.root_lines),
    "numeric_host_address": lambda ctx: any(_NUMERIC_HOST_ADDRESS.search(line) for line in ctx.root_lines),
    "socket_setup": lambda ctx: any(_SOCKET_SETUP.search(line) and "Connection refused" not in line
                                    for line in ctx.root_lines),
}


# the conditions that read when the failure happened (LOGDX_ABLATE=timing turns them off)
TIMING = frozenset({"first_collective", "early_collective", "never_connected", "before_training",
                    "after_training"})
# the conditions that read the timed-out collectives' shape and deadline (LOGDX_ABLATE=collectives)
SHAPE = frozenset({"scalar_collective", "mismatched_collectives", "short_timeout"})


def _switched_on(condition: str) -> bool:
    if condition in TIMING:
        return ablation.enabled("timing")
    return condition not in SHAPE or ablation.enabled("collectives")


@functools.lru_cache(maxsize=64)
def _compiled(pattern: str) -> regex.Pattern:
    return regex.compile(pattern)


def _any_line(pattern: str, lines: tuple[str, ...]) -> bool:
    rx = _compiled(pattern)
    # (a line the pattern runs out of time on does not show what the condition asks)
    return any(bounded_match(rx, line, timed_out=False) for line in lines)


@dataclass(frozen=True)
class Decision:
    kind: ActionKind
    reason: str
    policy_id: str


def decide(ctx: PolicyContext, policies: list) -> Decision:
    """First matching policy wins; a rule-level action override wins over every policy."""
    if ctx.rule_action is not None:
        return Decision(ctx.rule_action, "the matched rule prescribes this action", "rule-override")
    for policy in policies:
        if policy.error_type is not None and policy.error_type != ctx.error_type:
            continue
        if policy.category is not None and policy.category != ctx.category:
            continue
        if policy.rule is not None and policy.rule != ctx.rule_id:
            continue
        if policy.preceded_by is not None and not _any_line(policy.preceded_by, ctx.preceding):
            continue
        if all(_switched_on(c) and CONDITIONS[c](ctx) for c in policy.when):
            return Decision(policy.action, policy.reason, policy.id)
    return Decision(ActionKind.INVESTIGATE, "no policy covers this error type", "fallback")
