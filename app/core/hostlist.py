"""Slurm's compact host lists (`node[01-03,7],gpu1`) as the hosts they name.

Pure: used by the diagnosis (hosts a message names, `fields.located_hosts`) and by the restart
controller (`app/controller/hosts.py`), so both read a host list the same way.
"""

from __future__ import annotations

import re

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


def expand_or_keep(name: str) -> list[str]:
    """The hosts of a host list, or the name as written when it is none (a backwards range) or
    names too many to expand (it then maps to no node)."""
    try:
        return expand_hostlist(name) or [name]
    except ValueError:
        return [name]
