"""Which host a rank ran on, so that an isolate action can name the node to drain.

Two sources, in this order of trust:
- the log itself: NCCL prints one line per rank and communicator at init,
  `node-05:4105:4205 [1] NCCL INFO comm 0x55d4c8a0 rank 5 nranks 8 cudaDev 1 busId 3d000 ... - Init COMPLETE`,
  and the communicator with the most ranks is the world, whose rank numbers are global ranks.
  These lines are dropped as chatter, so they are found with a `bytes.find` pass over the first
  SCAN_BYTES of the log (the world communicator is built at start-up; scanning every chunk
  would cost about as much as compressing it);
- the registered job: its hosts (in list order) and GPU count, with ranks placed contiguously,
  `gpu_count / len(hosts)` per host (torchrun/srun's default block placement). An inference,
  and the action's reason says so.
torchrun's failure summary (`host : gpu-07` then `rank : 5 (local_rank: 5)`) and Cray MPICH's abort
report (`MPICH ERROR [Rank 5] [job id ...] [date] [nid001097] - Abort(...)`) add pairs for the ranks
they name. A failure that none of these places (a command's output pasted from a terminal) takes
the host of the shell prompt it was printed after (`root@node1:~# nvidia-smi`). An isolate action
for which none gives a host stays an isolate (the failure class is a hardware fault: restarting on
the same nodes fails again) with no suspect host, and its reason
says that the node probe must find the host: the restart controller probes the job's nodes
(two-round allgather) and drains only a node that fails it; nothing is drained on a guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from app.core import regexcache
from app.core.fields import (
    MPICH_ABORT, PALS_EXIT, PLACEHOLDER_HOSTS, block_line_host, field_line_host, located_hosts, failed_rank_report, prompt_host,
    split_launcher_prefix,
)
from app.core.types import Action, ActionKind

try:  # memmem without the GIL (app/core/_shapescan.c); bytes.find is the fallback
    from app.core._shapescan import lines_with
except ImportError:  # pragma: no cover - depends on the build
    lines_with = None

NO_HOST = "No host can be named"  # starts the note of an isolate whose node the probe must find
MAX_RANKS = 65_536
SCAN_BYTES = 32 * 1024 * 1024
_MARK = b" nranks "
_SUMMARY_HOST = regexcache.compile(r"^\s+host\s+:\s*([A-Za-z][\w.-]*)\s*$")
_SUMMARY_RANK = regexcache.compile(r"^\s+rank\s+:\s*(\d{1,7})\b")
# what both need somewhere in the line: a search for it spares most lines the prefix split
_SUMMARY_HINT = regexcache.compile(r"(?:host|rank)\s+:")
# NCCL's own host field, behind what launchers put first: pdsh's `node-3: ` / `10.0.0.15: `,
# mpirun --tag-output's `[1,4]<stdout>:`, torchrun's `[default0]:` / `[rank3]:`
_INIT_RE = regexcache.compile(
    rb"^(?:[\w.-]+: )?(?:\[\d+\]|\[\d+,\d+\]<std(?:out|err)>:)?(?:\[default\d+\]:|\[rank\d+\]:)?"
    rb"(?P<host>[A-Za-z][\w.-]*):\d+:\d+ \[\d+\] NCCL INFO .*?"
    rb"\brank (?P<rank>\d{1,7}) nranks (?P<nranks>\d{1,7})\b")


@dataclass(frozen=True)
class JobPlacement:
    """What the scheduler registered about the job (the service passes it; the CLI has none)."""

    hosts: tuple[str, ...] = ()
    gpu_count: int | None = None
    # how the attempt stopped without finishing, as the scheduler reported it ("ended timeout",
    # "ended with exit 1:0"), None while running or when it finished: a log that ends on a
    # training step is then a Hang at that step (rank.stalled_root)
    stopped: str | None = None

    def host_of(self, rank: int) -> str | None:
        if len(self.hosts) == 1:
            return self.hosts[0]
        if not self.hosts or not self.gpu_count or self.gpu_count % len(self.hosts) or rank >= self.gpu_count:
            return None
        return self.hosts[rank // (self.gpu_count // len(self.hosts))]


def _summary_hint(text: str) -> bool:
    """Could the line be a `host :` / `rank :` line of torchrun's summary (behind any prefix)?"""
    if "host" not in text and "rank" not in text:
        return False
    # in printable ASCII the only whitespace is the space: no ` :`, no match (no search, which
    # costs ~2 us on a long line that names a rank, as most launcher-prefixed lines do)
    if " :" not in text and text.isascii() and text.isprintable():
        return False
    return _SUMMARY_HINT.search(text) is not None


@dataclass
class RankHosts:
    """Global rank -> host from NCCL communicator-init lines (the largest communicator seen)."""

    world: int = 0
    hosts: dict[int, str] = field(default_factory=dict)
    budget: int = field(default_factory=lambda: SCAN_BYTES)  # bytes still to scan (the start of the log)
    summary: dict[int, str] = field(default_factory=dict)  # from failure reports (torchrun, MPICH)
    _summary_host: dict[str, str] = field(default_factory=dict)  # launcher prefix -> last `host :`

    def scan(self, buf: bytes | bytearray, length: int) -> None:
        if self.budget <= 0:
            return
        self.budget -= length
        for start, end in (lines_with(buf, _MARK, length, MAX_RANKS * 4) if lines_with is not None
                           else _lines_with(buf, _MARK, length)):
            m = _INIT_RE.match(bytes(buf[start:min(end, start + 1024)]))
            if m:
                self.add(int(m.group("rank")), m.group("host").decode("ascii", "replace"), int(m.group("nranks")))

    def add(self, rank: int, host: str, nranks: int) -> None:
        if nranks < self.world or rank >= nranks:
            return
        if nranks > self.world:  # a bigger communicator: the earlier ones were sub-groups
            self.world, self.hosts = nranks, {}
        if len(self.hosts) < MAX_RANKS:
            self.hosts.setdefault(rank, host)

    def merge(self, other: RankHosts) -> None:
        for rank, host in other.hosts.items():
            self.add(rank, host, other.world)
        for rank, host in other.summary.items():
            self.summary.setdefault(rank, host)

    def note_kept_line(self, text: str) -> None:
        """torchrun's failure summary: a `host :` line, then the `rank :` of that process (also
        behind a launcher's prefix: then the two lines pair up by prefix, as hosts' output
        interleaves); an MPICH abort report; PALS's report of a rank that exited."""
        if not self._summary_host and MPICH_ABORT not in text and PALS_EXIT not in text and not _summary_hint(text):
            return  # (nothing to pair up or to end, no summary or MPICH line: most kept lines)
        prefix, own = split_launcher_prefix(text)
        if own[:1] not in (" ", "\t"):
            pair = failed_rank_report(text)
            if pair and len(self.summary) < MAX_RANKS:
                self.summary.setdefault(*pair)
            self._summary_host.pop(prefix, None)
            return
        m = _SUMMARY_HOST.match(own)
        if m:
            if len(self._summary_host) < MAX_RANKS:
                self._summary_host[prefix] = m.group(1)
            return
        m = _SUMMARY_RANK.match(own)
        host = self._summary_host.pop(prefix, None)
        if m and host and len(self.summary) < MAX_RANKS:
            self.summary.setdefault(int(m.group(1)), host)

    @staticmethod
    def is_summary_line(text: str) -> bool:
        """A `host :` or `rank :` line of torchrun's failure summary (maybe behind a launcher's
        prefix): note_kept_line must see every such line, in order."""
        if not _summary_hint(text):
            return False
        own = split_launcher_prefix(text)[1]
        return own[:1] in (" ", "\t") and bool(_SUMMARY_HOST.match(own) or _SUMMARY_RANK.match(own))

    def mapping(self) -> dict[int, str]:
        """rank -> host: NCCL's world communicator first, failure reports for other ranks."""
        return {**self.summary, **self.hosts}


def _lines_with(buf: bytes | bytearray, needle: bytes, length: int):
    """(start, end) of each line of buf[:length] that holds `needle` (the C loop's `lines_with`)."""
    pos = buf.find(needle, 0, length)
    while pos >= 0:
        start = buf.rfind(b"\n", 0, pos) + 1
        end = buf.find(b"\n", pos, length)
        end = length if end < 0 else end
        yield start, end
        pos = buf.find(needle, end, length)


def session_host(templates, line: int) -> str | None:
    """The host of the shell session `line` was printed in: the host of the last prompt before it
    (`root@node1:~# nvidia-smi`), or None when a folded prompt line of another host may sit unseen
    between that prompt and the line. With no prompt before it, a prompt after it (the shell
    came back to its prompt when the command ended) names the host when every prompt of the log
    names that one host."""
    prompts = [t for t in templates if t.first_line < line and prompt_host(t.text)]
    seen = [(t.first_line, prompt_host(t.text)) for t in prompts]
    seen += [(t.last_line, prompt_host(t.last_line_text)) for t in prompts if t.last_line < line]
    seen = [(at, host) for at, host in seen if host]
    if not seen:
        later = {prompt_host(text) for t in templates if t.first_line > line for text in {t.text, t.last_line_text}}
        later.discard(None)
        return next(iter(later)) if len(later) == 1 else None
    at, host = max(seen)
    for t in prompts:  # lines between a template's first and last are counted, not kept
        if t.count > 2 and t.last_line > at and t.hosts != {host}:
            return None
    return host


def ranked_suspect_hosts(ev, *, printers: int | None = None) -> list[str]:
    """The hosts of an event, most likely first: those its messages name as where the fault lies
    (a transport error's remote peer, a node a scheduler or Ray reports lost, each host of a Slurm
    host list: `fields.located_hosts`), then the hosts that printed its lines in line order, then
    any other host seen on it. With `printers`, the printing hosts count only when at most that
    many printed it: an error every host printed (a collective timeout) points at none of them."""
    out: list[str] = []
    for occ in ev.occurrences:
        out += [h for h in located_hosts(occ.text) if h not in out and h.lower() not in PLACEHOLDER_HOSTS]
    printed = [o.host for o in ev.occurrences if o.host and o.host.lower() not in PLACEHOLDER_HOSTS]
    known = [h for h in ev.hosts if h.lower() not in PLACEHOLDER_HOSTS]
    if printers is not None and len(set(printed) | set(known)) > printers:
        return out
    for host in printed:
        if host not in out:
            out.append(host)
    return out + sorted(h for h in known if h not in out)


# a help text's key-value block follows its message within a few lines (Open MPI's is 14)
BLOCK_LINES = 16
ACTOR_FIELD_LINES = 8  # Ray's actor-error fields above its cause line (class_name ... ip)


def block_hosts(ev, log) -> list[str]:
    """Hosts that the lines just after the event's first line name as where the fault lies: a
    multi-line message (Open MPI's help text, `Peer host: node-7` under "An MPI communication peer
    process has unexpectedly disconnected") names the other end on a line of its own; Ray's actor
    error lists the actor's `ip:` field just above its cause line ("The actor is dead because its
    node has died"). `log`: the compressed log, whose templates (first lines) and context hold the
    kept lines."""
    below = range(ev.first_line + 1, ev.first_line + BLOCK_LINES + 1)
    above = range(ev.first_line - ACTOR_FIELD_LINES, ev.first_line)
    lines = {t.first_line: t.text for t in log.templates if t.first_line in below or t.first_line in above}
    lines.update((n, s) for n, s in log.context.items() if n in below or n in above)
    out: list[str] = []
    for n in sorted(lines):
        host = block_line_host(lines[n]) if n > ev.first_line else field_line_host(lines[n])
        if host is not None and host not in out and host.lower() not in PLACEHOLDER_HOSTS:
            out.append(host)
    return out


# the scheduler's record of where the job ran, printed into its output: PBS's `Exec host:
# gpu-2-17/5` (`host/cpu`, `+` between hosts), Slurm's `NodeList=c014` (a host list for
# several nodes) and Moab's checkjob `Task Distribution: gpu-2-17` (`host,host` for several).
# Only a single host is taken: a job that ran on one node had its fault there.
_ALLOCATION_RE = regexcache.compile(
    r"^\s*(?:Exec host|exec_host)\s*[:=]\s*([A-Za-z][\w.-]*)/[\d*]+\s*$"
    r"|\bNodeList=([A-Za-z][\w.-]*)(?=\s|$)"
    r"|^\s*Task Distribution:\s*([A-Za-z][\w.-]*)\s*$")


def allocated_host(templates) -> str | None:
    """The job's one host as the scheduler's lines in the log record it (see `_ALLOCATION_RE`),
    else None (no such line, or lines that name different hosts)."""
    found = set()
    for t in templates:
        if "xec" not in t.text and "NodeList=" not in t.text and "Task Distribution" not in t.text:
            continue
        if m := _ALLOCATION_RE.search(t.text):
            found.add(m.group(1) or m.group(2) or m.group(3))
    return next(iter(found)) if len(found) == 1 else None


def name_hosts(action: Action, *, rank_hosts: dict[int, str], job: JobPlacement | None,
               session: str | None = None, sole_host: str | None = None,
               allocated: str | None = None, placed: bool = False) -> Action:
    """An isolate action with its hosts named from the ranks it suspects (or, with no rank, from
    the shell `session` the failure was printed in, the `sole_host` every host-prefixed line of
    the log names, or the one host the scheduler's lines say the job was `allocated`), or a reason
    saying that the node probe must find the host. `placed`: the root cause is an infrastructure
    fault whatever its action (a retry, an investigate): the same session, sole host or
    allocation names the host an engineer looks at first (and the controller counts a retry's
    hosts towards repeat offenders); no reason is added when none is found."""
    if action.suspect_hosts:
        return action
    ranks = action.suspect_ranks
    if action.kind is not ActionKind.ISOLATE_AND_RESTART:
        return (_one_host(action, session, sole_host, allocated) or action) if placed and not ranks else action
    found = sorted({rank_hosts[r] for r in ranks if r in rank_hosts})
    if found:
        return replace(
            action, suspect_hosts=found[:32],
            reason=(f"{action.reason} Host(s) of rank(s) {_ranks(ranks)} as the log maps them "
                    "(NCCL init lines, torchrun's failure summary, MPICH's abort report)."))
    if (named := _one_host(action, session, sole_host if not ranks else None, allocated)) is not None:
        return named
    if job is not None:
        found = sorted({h for h in (job.host_of(r) for r in ranks) if h})
        if found:
            how = ("the job's only host" if len(job.hosts) == 1 else
                   f"inferred from the job's placement: {job.gpu_count // len(job.hosts)} ranks per host "
                   "over its registered hosts in order")
            return replace(action, suspect_hosts=found[:32],
                           reason=f"{action.reason} Host(s) of rank(s) {_ranks(ranks)}: {how}.")
    why = (f"rank(s) {_ranks(ranks)} cannot be mapped to a host" if ranks else "the failure names no rank")
    return replace(action, reason=(
        f"{action.reason} {NO_HOST} ({why}: the log has no host prefixes or NCCL init "
        "lines, and the job was not registered with its hosts and GPU count): probe the job's "
        "nodes (two-round allgather) to find it; drain only a node that fails the probe."))


def _one_host(action: Action, session: str | None, sole_host: str | None, allocated: str | None) -> Action | None:
    """The action with the one host the log places the failure on, in this order of trust: the
    shell `session` it was printed in, the `sole_host` every host-prefixed line names (the log is
    one host's output: the process that hit a fault of its own GPU ran there; the caller passes it
    for GPU faults), the one host the scheduler's lines say the job was `allocated`; None when
    there is none."""
    for host, how in ((session, "the shell session the failure was printed in (its prompts name it)"),
                      (sole_host, "the only host the log's lines are printed by"),
                      (allocated, "the job's only host, as the scheduler's lines in the log record it")):
        if host is not None:
            return replace(action, suspect_hosts=[host], reason=f"{action.reason} Host {host}: {how}.")
    return None


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:8])) + (", …" if len(ranks) > 8 else "")
