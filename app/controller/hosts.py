"""Host names as a log writes them, made into the names the scheduler knows.

Logs and job records name hosts as Slurm hostlists (`node[1-4]`, `gpu[01-03,7]-ib`), as fully
qualified names (`node3.cluster.example`) or as the scheduler's short names. The controller
expands hostlists, reduces a name to its first label (an IP address stays whole) and, given
the scheduler's node list, maps each name to a node it knows, so that a probe, a drain or an
incident count never silently misses a host written another way.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from app.core.hostlist import MAX_EXPANDED, expand_hostlist, expand_or_keep  # noqa: F401 (re-exported)

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
        for host in expand_or_keep(name):
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
    for name in dict.fromkeys(h for n in names for h in expand_or_keep(n)):
        if name in exact:
            mapped[name] = name
        elif len(by_short.get(short_name(name), [])) == 1:
            mapped[name] = by_short[short_name(name)][0]
        else:
            unknown.append(name)  # none, or ambiguous (two domains with the same short name)
    return HostMap(nodes=mapped, unknown=tuple(unknown))
