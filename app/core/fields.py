"""Generic field extraction from a log line: rank, host, timestamp, and line masking for folding.

Rules capture `rank`/`host` themselves where their format carries them; these extractors fill the
gaps from the common prefixes launchers add (`[rank3]:`, `[Rank 3]`, `3: ` from `srun -l`,
`node-12: ` from pdsh/srun, NCCL's `host:pid:tid [local]`, syslog's `Mon DD HH:MM:SS host`).

A host is read only where the line's format says "this line comes from that host": a prefix at
the start of the line (pdsh and DeepSpeed's multi-node launcher write `node-12: ` or
`10.0.0.15: `; pdsh's own `pdsh@launcher: node-12: ssh exited ...` is about the remote host;
Ray's `(RayTrainWorker pid=364, ip=10.0.0.218) ` on output relayed to the driver),
NCCL's `host:pid:tid [dev]` after the launcher's tags (`[1,4]<stdout>:` from mpirun
--tag-output, `[default0]:`, `[rank3]:`), `kubectl logs --prefix`'s `[pod/NAME/CONTAINER] `, Open
MPI's `[host:pid] ` on its own reports, a shell prompt (`user@host:~$ cmd`), syslog. An IP
address anywhere else in a message (a master address, a peer, `connect to 10.1.2.3:29500`) is
not the line's host, and neither is `srun --label`'s `0: ` (a task id).
"""

from __future__ import annotations

import regex

from app.core import regexcache
from app.core.hostlist import expand_or_keep

_RANK_RES = [
    regexcache.compile(r"\[(?:rank|Rank|RANK)\s?(\d{1,6})\]"),
    regexcache.compile(r"^\[default(\d{1,6})\]:"),
    regexcache.compile(r"\b(?:global_rank|rank)[=:]\s?(\d{1,6})\b"),
    regexcache.compile(r"^(?:[A-Za-z][\w.-]*:\s)?(\d{1,5}):\s"),
]
_HOST_TOKEN = r"[A-Za-z][A-Za-z0-9_-]*(?:\d[A-Za-z0-9_-]*|-[A-Za-z0-9_-]+)(?:\.[A-Za-z0-9_-]+)*"
# a dotted quad, not followed by more of a version number or a port (`10.0.0.15:29500` is an address)
_IPV4 = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?:\.(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}(?![\d.])"
# a launcher's per-line prefix: the host as pdsh / DeepSpeed's multi-node runner write it; not a
# message code that opens a line the same way (Ascend CANN's `EI0002: ...`, `EE9999: ...`, `E19999`)
_PREFIX_HOST = "(?:" + _IPV4 + r"|(?!E[A-Z0-9]\d{4}:)" + _HOST_TOKEN + ")"
# tags launchers put before the program's own text: `[1,4]<stdout>:` (mpirun --tag-output, maybe
# behind its ISO timestamp or --timestamp-output's ctime one, `Fri Aug 11 12:31:45 2023[1,0]<stdout>:`),
# `[default0]:`, `[rank3]:`, `[3]`
_TAGS = (r"(?:[\w./-]+\.(?:log|txt|out|err)(?::\d+)?:)?"  # grep -H's `file.log:` (and -n's line number)
         r"(?:\d{4}-\d\d-\d\dT[\d:.]+Z?:?\s|\[\d{4}-\d\d-\d\d[ T][\d:.,]+\]\s|"
         r"[A-Z][a-z]{2} [A-Z][a-z]{2} {1,2}\d{1,2} [\d:]{8} \d{4}(?=\[\d+,\d+\]<std))?(?:\[\d+,\d+\]<std(?:out|err|diag)>:|\[default\d+\]:"
         r"|\[(?:rank|Rank)\d+\]:|\[\d+\])?")
# a shell prompt: `(venv) root@node1:~/dir# cmd`, `user@host:~$ cmd`, zsh `user@host ~ % cmd`,
# `[user@host dir]$ cmd`, a PS1 that shows the last exit status first (`(venv) 134 user@host:~$`);
# the prompt's syntax says it is a host, so any host name goes
_PROMPT_HOST = r"[A-Za-z][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*"
_PROMPT_RE = regexcache.compile(
    r"^(?:\([\w.-]+\)\s+)?(?:\d{1,3}\s+)?\[?[a-z_][\w.-]*@(" + _PROMPT_HOST + r")(?::\S*|\s+\S+)?\]?\s?[$#%](?:\s|$)")
MPICH_ABORT = "MPICH ERROR [Rank "
_MPICH_ABORT_RE = regexcache.compile(
    r"MPICH ERROR \[Rank (?P<rank>\d{1,7})\] \[job id [^\]]*\] \[[^\]]*\] (?:\[unknown\] )?"
    r"\[(?P<host>" + _PROMPT_HOST + r")\]")
# PALS (HPE Cray's mpiexec) on a rank that ended with an error: `<host>: rank 7 exited with code 1`
PALS_EXIT = " exited with code "
_PALS_EXIT_RE = regexcache.compile(r"^(?P<host>" + _PROMPT_HOST + r"): rank (?P<rank>\d{1,7}) exited with code [1-9]\d*\s*$")
# the same, with the host as group 1 like every host pattern
_MPICH_HOST_RE = regexcache.compile(_MPICH_ABORT_RE.pattern.replace("(?P<rank>", "(?:").replace("(?P<host>", "("))
# what a program prints where it could not tell its host name (rdma-core's mlx5 provider prints
# `host_unknown`): no host to name; the line's other hosts (a Ray `ip=` prefix) still are
PLACEHOLDER_HOSTS = frozenset({"host_unknown", "unknown", "localhost", "none", "(none)", "n/a"})


# what a launcher puts before a line's own text: a host label (pdsh, DeepSpeed's runner, srun's
# task id `0: `) and tags (`[rank3]:`, `[default3]:`, mpirun's `[1,4]<stdout>:`)
_LAUNCHER_PREFIX_RE = regexcache.compile(
    r"^(?:(?:" + _PREFIX_HOST + r"|\d{1,5}):(?:\s|$))?(?:\[\d+,\d+\]<std(?:out|err|diag)>:|\[default\d+\]:"
    r"|\[(?:rank|Rank|RANK)\s?\d+\]:)?")
# "on host node-12", "hostname=node-12", "node node-12"
_NAMED_HOST_RE = regexcache.compile(r"\b(?:host(?:name)?|node)[=:\s]\s?(" + _HOST_TOKEN + r")\b")
# a line quoted in an issue thread or a mail keeps its fields behind the quote mark: "> node-12: ...",
# behind a terminal UI's box-drawing border (k9s, a tmux pane: "│ node-12:73:91 [1] NCCL ...") or
# markdown's inline-code backtick
_QUOTE = r"(?:[>\u2502`] ?)?"
# syslog's month: `Jul`, or under a CJK locale `7月`
_SYSLOG_MONTH = r"(?:[A-Z][a-z]{2}|\s?\d{1,2}\u6708)"
_HOST_RES = [
    # syslog / journald: "Jul 14 03:12:55 node-12 kernel: ..."
    # (a CJK locale prints the month as a number: "4月 28 15:08:10 master-02 containerd[38]: ...";
    # a log shipper in UTC marks the time: "Dec 17 16:04:09Z worker-1 systemd-logind Power key pressed.")
    regexcache.compile(r"^" + _QUOTE + _SYSLOG_MONTH + r"\s+\d{1,2}\s[\d:]{8}Z?\s(" + _HOST_TOKEN + r")\s"),
    # ... where the field after the time stamp is the host by the format (RFC 3164; rsyslog's
    # high-precision ISO stamp), whatever its name, when the program tag follows it: "Dec 31
    # 01:21:28 FORGE ollama[555]: ...", "2024-01-03T04:05:06.123+00:00 gpu17 kernel: ..."
    regexcache.compile(r"^" + _QUOTE + r"(?:" + _SYSLOG_MONTH + r"\s+\d{1,2}\s[\d:]{8}|\d{4}-\d\d-\d\dT[\d:.]{8,}(?:Z|[+-]\d\d:\d\d))"
                       r"\s([A-Za-z][A-Za-z0-9_.-]*)\s(?:kernel|[\w./-]+\[\d+\]):\s"),
    # NCCL: "node-12:1234:5678 [3] NCCL ...", behind a launcher's tags (or indented, as a log
    # quoted in a markdown code block is: "    gpu46:78367:78492 [0] transport/nvls.cc:244 ...")
    regexcache.compile(r"^" + _QUOTE + r"[ \t]*" + _TAGS + "(" + _HOST_TOKEN + r"):\d+:\d+\s\[\d+\]"),
    # pdsh's own report on a remote host: "pdsh@launcher: 10.0.0.15: ssh exited with exit code 1"
    regexcache.compile(r"^" + _QUOTE + r"pdsh@[\w.-]+:\s(" + _PREFIX_HOST + r"):\s"),
    # rdma-core's mlx5 provider dumps a bad completion under the host's name (providers/mlx5:
    # "mlx5: %s: got completion with error:", `host_unknown` when it cannot tell;
    # not a pdsh prefix `mlx5`)
    regexcache.compile(r"^" + _QUOTE + r"mlx5: (" + _PROMPT_HOST + r"): got completion with error"),
    # pdsh / DeepSpeed multi-node launcher: "node-12: ...", "10.0.0.15: [rank37]:..."
    regexcache.compile(r"^" + _QUOTE + r"(" + _PREFIX_HOST + r"):\s"),
    # Ray relays a task's or actor's output to the driver as "(RayTrainWorker pid=364, ip=10.0.0.218) ..."
    # (the address only for another node than the driver's)
    regexcache.compile(r"^" + _QUOTE + r"\((?:[^()\s]+ )?pid=\d+, ip=(" + _IPV4 + r")\)"),
    # `kubectl logs --prefix`: "[pod/trainer-worker-3/pytorch] ..." (the pod is the host a
    # Kubernetes job's line comes from, whatever its name)
    regexcache.compile(r"^" + _QUOTE + r"\[pod/([a-z0-9][a-z0-9.-]*)/[\w.-]+\] "),
    # nccl-tests' failure reports name the host whatever its name (src/common.h: CUDACHECK and
    # NCCLCHECK print "%s: Test CUDA failure %s:%d '%s'" / "%s: Test NCCL failure ...", TESTCHECK
    # " .. %s pid %d: Test failure %s:%d"; older versions without the pid), behind mpirun's tags
    regexcache.compile(r"^" + _QUOTE + _TAGS + r"(?: \.\. )?(" + _PROMPT_HOST + r")(?: pid \d+)?: Test (?:CUDA |NCCL )?failure "),
    # Open MPI's own reports on a process (its signal handler, opal's backtrace, its show_help):
    # "[node-3:12345] *** Process received signal ***", "[node-3:12345] Signal: Segmentation fault (11)"
    regexcache.compile(r"^" + _QUOTE + r"\[(" + _HOST_TOKEN + r"):\d{2,7}\] "),
    _PROMPT_RE,
    # Cray MPICH's abort report names the node of the rank: "MPICH ERROR [Rank 5] [job id 40341.0]
    # [Tue Dec 12 17:52:24 2023] [nid001097] - Abort(...)" (`[unknown]` before it on some versions)
    _MPICH_HOST_RE,
    _NAMED_HOST_RE,
]
# hosts a message names as where the fault is, whoever printed the line: the remote side of a
# transport error ("Got completion from peer 10.0.0.7<48598>", "Connection closed by remote peer
# node-3"), a node a scheduler or Ray reports lost ("Node failure on worker-1", "nodes
# gpu[01-03] ... NODE_FAIL", "Owner Ip address: 10.0.0.9", "node ... address: 10.0.0.9 ... marked
# dead"), a Kubernetes node ("node \"gpu-node-7\" not ready", "evicted from node gpu-node-7"). A
# Slurm host list (`node[01-04,07]`) names each of its hosts.
_HOSTLIST = r"[A-Za-z][A-Za-z0-9_-]*\[[\d,\s-]+\][A-Za-z0-9_-]*"
_LOCATED_HOST = "(?:" + _HOSTLIST + "|" + _IPV4 + "|" + _HOST_TOKEN + ")"
# Ascend HCCL's cluster heartbeat spreads a fault to every rank, so any rank's log names the rank
# where it lies, by IP and device: the Cluster Exception report under an execution timeout
# (`Cluster Exception Location[IP/ID]:[90.90.92.240/1], ..., Discoverer:[90.90.92.240/0],
# ExceptionType:[Heartbeat Lost Occurred]`; the discoverer is the reporting side) and the run
# log's `[HeartbeatAbnormal]local rank[IP/ID]: crimer rank[IP/ID] status[...] by informer rank[...]`
# (HCCL user guide, "Cluster Heartbeat Mechanism")
_HCCL_ROOT_RE = regexcache.compile(
    r"\b(?:Cluster Exception Location\[IP/ID\]:|crimer rank)\s*\[(" + _IPV4 + r")/\d+\]")
_LOCATED_RES = [
    # (Gloo brackets the address: "Connection closed by peer [10.0.0.7]:12717")
    regexcache.compile(r"\b(?:from|to|by|with)\s+(?:remote\s+)?peer\s+[(\[]?(" + _LOCATED_HOST + r")"),
    regexcache.compile(r"\bremote (?:host|peer|process)\s+\(?(" + _LOCATED_HOST + r")"),
    # NCCL writes a socket's address as `ip<port>` (ncclSocketToString): the other end of the link
    regexcache.compile(r"(?<![\w.])(" + _IPV4 + r")<\d{1,5}>"),
    regexcache.compile(r"(?i)\bnode failure on\s+(" + _LOCATED_HOST + r")"),
    # a socket library that names the other end of the connection that failed (PaddlePaddle's
    # SocketChannel: "Check failed: len >= 0  peer=10.89.199.23: Connection reset by peer [104]")
    regexcache.compile(r"(?<![\w.])peer=(" + _IPV4 + r")(?![\w.])"),
    regexcache.compile(r"\b(?:nodes?|NodeList=|node_list=)\s?[\"']?(" + _HOSTLIST + r")"),
    regexcache.compile(r"\b[Nn]odes?\s+\"?(" + _LOCATED_HOST + r")\"?\s+(?:(?:is|was|has been)\s+)?"
                       r"(?:not responding|down|failed|fail|NotReady|not ready|unreachable|marked dead|"
                       r"lost|rebooted|had condition)"),
    regexcache.compile(r"\b(?:evicted from|on|from) node \"?(" + _LOCATED_HOST + r")\"?"),
    regexcache.compile(r"\bOwner Ip address:\s*(" + _IPV4 + r")"),
    # Ray's driver on a node's raylet that went away: "Raylet is terminated: ip=172.29.58.133, id=..."
    regexcache.compile(r"\bRaylet is terminated: ip=(" + _IPV4 + r")"),
    regexcache.compile(r"\bnode_ip(?:_address)?[=:]\s*['\"]?(" + _IPV4 + r")"),
    regexcache.compile(r"(?i)\bnode (?:id[: ]+\S+ )?(?:and )?(?:address|ip)[: ]+(" + _IPV4 + r")"),
    _HCCL_ROOT_RE,
    # Slurm's step daemon could not kill the step's processes (unkillable: hung I/O, a GPU driver
    # stuck) and the controller drains that node "Kill task failed"; the daemon names its own node
    # (SchedMD/slurm src/slurmd/slurmstepd/step_terminate_monitor.c: "*** %s STEPD TERMINATED ON %s
    # AT %s DUE TO JOB NOT ENDING WITH SIGNALS ***", the node name second)
    regexcache.compile(r"\bSTEPD TERMINATED ON (" + _LOCATED_HOST + r") AT \S+ DUE TO JOB NOT ENDING WITH SIGNALS\b"),
]
_LOCATED_LITERALS = ("peer", "remote", "ode", "NODE", "Owner Ip", "node_", "<", "Raylet", "Location[IP", "crimer",
                     "STEPD")
# Open MPI's help texts name the other end in a key-value line of their own, below the message:
# "  Peer host:  node-7", "Remote daemon: [[11377,0],1] on node worker-0", the older "lost
# communication with its daemon located on node:" over "  hostname:  node-7", the runtime's
# "  target node:  10.0.0.2" (no route / no connection to a daemon) and "  Node:  node-7" (a
# communication path or heartbeat lost to a rank) (not "Local host:", "my node:" or "HNP daemon :",
# the reporting side)
_BLOCK_HOST = regexcache.compile(
    r"^\s*(?:Peer host|Remote host|Remote daemon|hostname|target node|Node)\s*:\s*(?:\[\[\d+,\d+\],\d+\] on node\s+)?("
    + _LOCATED_HOST + r")\s*$")


def block_line_host(text: str) -> str | None:
    """The host a help text's key-value line names as the other end (see `_BLOCK_HOST`), or the
    rank HCCL's cluster exception report below an execution timeout names as the fault's place
    (`_HCCL_ROOT_RE`), else None."""
    if "Location[IP" in text and (m := _HCCL_ROOT_RE.search(text)):
        return m.group(1)
    if "host" not in text and "daemon" not in text and "ode" not in text:
        return None
    m = _BLOCK_HOST.search(text)
    return m.group(1).rstrip(".,:;") if m else None


# Ray's RayActorError lists the dead actor's fields indented above its cause line ("\tclass_name:
# RayTrainWorker", "\tpid: 6420", "\tip: 10.72.56.3", then "The actor is dead because its node
# has died."): the `ip` field is the node the actor ran on
_ACTOR_IP_FIELD = regexcache.compile(r"^\s+ip:\s*(" + _IPV4 + r")\s*$")


def field_line_host(text: str) -> str | None:
    """The node a Ray actor-error field line (`\tip: 10.0.0.3`) names, else None."""
    if "ip:" not in text:
        return None
    m = _ACTOR_IP_FIELD.search(text)
    return m.group(1) if m else None


def located_hosts(text: str) -> list[str]:
    """Hosts the message names as where the fault lies (see `_LOCATED_RES`), in line order, host
    lists expanded; [] for most lines (each pattern runs only on a line holding its literal)."""
    if not any(lit in text for lit in _LOCATED_LITERALS):
        return []
    found: list[tuple[int, str]] = []
    for rx in _LOCATED_RES:
        for m in rx.finditer(text):
            token = m.group(1).rstrip(".,:;")
            if token in _NOT_HOSTS or token.endswith(("Error", "Exception")) or token.lower() in _NOT_LOCATED:
                continue
            found.append((m.start(1), token))
    out: list[str] = []
    for _, token in sorted(found):
        for host in expand_or_keep(token):
            if host not in out:
                out.append(host)
    return out


_NOT_LOCATED = {"the", "a", "an", "is", "was", "has", "with", "and", "or", "in", "id", "ids", "rank",
                "failure", "failures", "selector", "affinity", "local", "manager", "process", "group"}
_HOST_ANCHORED = _HOST_RES[:-3]  # host_match searches these always, the last three on a literal
_NOT_HOSTS = {"Traceback", "File", "RuntimeError", "Error", "WARNING", "INFO", "ERROR", "NCCL", "kernel",
              "wandb", "Epoch", "iteration", "rank", "Rank", "torch", "NVRM", "Xid", "node"}
_TIMESTAMP_RE = regexcache.compile(
    r"(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)")
_HEX_RE = regexcache.compile(r"0x[0-9a-fA-F]+|\b[0-9a-f]{12,}\b")
_NUM_RE = regexcache.compile(r"\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")

try:  # fold_key's C path for ASCII text (in the optional scan-loop extension)
    from app.core._shapescan import fold_ascii as _fold_ascii
except ImportError:  # pragma: no cover - depends on the build
    _fold_ascii = None

DIGITS = b"0123456789"
# a line's shape is the line with its digits deleted: numbers of any width collapse together
SHAPE_DELETE_STR = str.maketrans("", "", "0123456789")


def rank_match(text: str) -> regex.Match | None:
    """The match whose group 1 is the line's rank (its span locates the field in the line)."""
    # all but the last pattern need `rank`/`Rank`/`RANK` or `default` (most metric lines have
    # neither), and each of them runs only on a line holding the literal it starts with: a
    # `0_default` or a `rank` elsewhere in a line no longer sends it through three searches
    if "ank" in text or "ANK" in text or "default" in text:
        bracket, default, named, _ = _RANK_RES
        m = ("[rank" in text or "[Rank" in text or "[RANK" in text) and bracket.search(text)
        if m:
            return m
        m = text.startswith("[default") and default.search(text)
        if m:
            return m
        m = ("rank=" in text or "rank:" in text) and named.search(text)
        if m:
            return m
    return _RANK_RES[-1].search(text)


def _a_host(m: regex.Match | None) -> bool:
    """A host pattern's match names a host (not a word that only sits where a host would)."""
    return m is not None and m.group(1) not in _NOT_HOSTS and not m.group(1).endswith(("Error", "Exception"))


def host_match(text: str) -> regex.Match | None:
    """The match whose group 1 is the line's host name."""
    for rx in _HOST_ANCHORED:
        if _a_host(m := rx.search(text)):
            return m
    # the last three each need a literal (a line with no host took ~4.3 us through every
    # pattern, ~2 of them in the last one, which is not anchored)
    if "@" in text and _a_host(m := _PROMPT_RE.search(text)):
        return m
    if MPICH_ABORT in text and _a_host(m := _MPICH_HOST_RE.search(text)):
        return m
    if ("host" in text or "node" in text) and _a_host(m := _NAMED_HOST_RE.search(text)):
        return m
    return None


def prompt_host(text: str) -> str | None:
    """The host a shell prompt names (`user@host:~$ cmd`): the lines after it ran there."""
    m = _PROMPT_RE.match(text)
    return m.group(1) if m else None


def failed_rank_report(text: str) -> tuple[int, str] | None:
    """(rank, host) from a launcher's report of a rank that failed: Cray MPICH's abort report, or
    PALS's report of a rank that exited with an error (`x4610c4s3b0n0.hsn.cm.aurora.alcf.anl.gov:
    rank 7 exited with code 1`: mpiexec on HPE Cray systems, printed where the rank ran)."""
    if MPICH_ABORT in text:
        m = _MPICH_ABORT_RE.search(text)
    elif PALS_EXIT in text:
        m = _PALS_EXIT_RE.match(text)
    else:
        return None
    return (int(m.group("rank")), m.group("host")) if m else None


def extract_rank(text: str) -> int | None:
    m = rank_match(text)
    return int(m.group(1)) if m else None


def extract_host(text: str) -> str | None:
    m = host_match(text)
    return m.group(1) if m else None


def extract_time(text: str) -> str | None:
    m = _TIMESTAMP_RE.search(text)
    return m.group(1) if m else None


def fold_key(text: str) -> str:
    """The template of a line: numbers and hex masked, so repeats across ranks/steps collapse
    (ASCII text in C when the scan loop is built: the same key, ~20x faster than the two subs)."""
    if _fold_ascii is not None and text.isascii():
        return _fold_ascii(text)
    return fold_key_re(text)


def fold_key_re(text: str) -> str:
    """fold_key with the regex engine (any text; the reference the C path is tested against)."""
    return _NUM_RE.sub("0", _HEX_RE.sub("<hex>", text))


def split_launcher_prefix(text: str) -> tuple[str, str]:
    """(prefix, rest): the launcher's per-line prefix (`10.0.0.15: `, `node-3: [rank3]:`, `0: `)
    and the program's own text after it (the prefix is "" when there is none)."""
    m = _LAUNCHER_PREFIX_RE.match(text)
    end = m.end() if m else 0
    return text[:end], text[end:]


def is_prefix_only(text: str) -> bool:
    """Whether the text is nothing but launcher prefixes (`10.0.0.11: [rank0]:`): what a progress
    bar redrawn with \\r leaves before its first \\r."""
    rest, seen = text.lstrip(), False
    while rest:
        prefix, after = split_launcher_prefix(rest)
        if not prefix:
            return False
        rest, seen = after.lstrip(), True
    return seen
