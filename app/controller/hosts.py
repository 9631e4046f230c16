"""Host names as a log writes them, made into the names the scheduler knows.

Logs and job records name hosts as Slurm hostlists (`node[1-4]`, `gpu[01-03,7]-ib`), as fully
qualified names (`node3.cluster.example`) or as the scheduler's short names. The controller
expands hostlists, reduces a name to its first label (an IP address stays whole) and, given
the scheduler's node list, maps each name to a node it knows, so that a probe, a drain or an
incident count never silently misses a host written another way.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

_RANGE = re.compile(r"\[([^\[\]]*)\]")
MAX_EXPANDED = 4096  # a hostlist in a log is data: `n[1-999999999]` must not fill memory


def _split_top(text: str) -> list[str]:
    """`a,b[1-3,5],c` -> ['a', 'b[1-3,5]', 'c']: commas outside brackets separate names."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _expand_one(name: str, budget: int) -> list[str]:
    m = _RANGE.search(name)
    if m is None:
        return [name]
    head, tail = name[:m.start()], name[m.end():]
    out: list[str] = []
    for item in m.group(1).split(","):
        lo, _, hi = item.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            return [name]  # not a hostlist range: keep the name as written
        width = len(lo) if lo.startswith("0") else 0  # node[01-10]: node01 ... node10
        for n in range(int(lo), int(hi or lo) + 1):
            for rest in _expand_one(tail, budget):
                out.append(f"{head}{str(n).zfill(width)}{rest}")
                if len(out) > budget:
                    raise ValueError(f"hostlist {name!r} names more than {budget} hosts")
    return out


def expand_hostlist(text: str, *, limit: int = MAX_EXPANDED) -> list[str]:
    """Slurm hostlist syntax to names, in order, without repeats: `node[01-03,7],gpu1`."""
    out: list[str] = []
    for part in _split_top(text):
        out.extend(_expand_one(part, limit - len(out)))
    return list(dict.fromkeys(out))


def _expand_or_keep(name: str) -> list[str]:
    try:
        return expand_hostlist(name)
    except ValueError:
        return [name]  # too many to expand: kept as written, so it maps to no node (untested)


def short_name(host: str) -> str:
    """`node3.cluster.example` -> `node3`; an IP address stays whole."""
    host = host.strip().rstrip(".")
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        return host.split(".", 1)[0]


def normalise_hosts(names: Iterable[str]) -> tuple[str, ...]:
    """Hostlists expanded, FQDNs reduced to short names, repeats dropped (order kept)."""
    out: list[str] = []
    for name in names:
        for host in _expand_or_keep(name):
            out.append(short_name(host))
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class HostMap:
    """Each asked name -> the scheduler's node; `unknown`: names no node matches (untested)."""

    nodes: dict[str, str]
    unknown: tuple[str, ...]

    @property
    def known(self) -> list[str]:
        return list(dict.fromkeys(self.nodes.values()))


def map_hosts(names: Iterable[str], known: Iterable[str] | Mapping[str, object]) -> HostMap:
    """Match names to the scheduler's nodes: exactly, else by short name either way round
    (the log's FQDN for the scheduler's short name, or the reverse)."""
    known = list(known)
    by_short: dict[str, list[str]] = {}
    for node in known:
        by_short.setdefault(short_name(node), []).append(node)
    exact = set(known)
    mapped: dict[str, str] = {}
    unknown: list[str] = []
    for name in dict.fromkeys(h for n in names for h in _expand_or_keep(n)):
        if name in exact:
            mapped[name] = name
        elif len(by_short.get(short_name(name), [])) == 1:
            mapped[name] = by_short[short_name(name)][0]
        else:
            unknown.append(name)  # none, or ambiguous (two domains with the same short name)
    return HostMap(nodes=mapped, unknown=tuple(unknown))
