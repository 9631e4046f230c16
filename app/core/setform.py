"""The form of a pattern that a multi-pattern set runs: only *whether* it matches matters there.

An RE2 set answers "which patterns match somewhere in this line", through one lazily built DFA
over all patterns. Building that DFA is most of what a new kind of line costs: every state holds
the live threads of every pattern. Many rule patterns start with optional parts that only serve
their capture groups (`(?:(?P<host>[\\w.-]+):(?P<pid>\\d+):\\d+ \\[(?P<gpu>\\d+)\\] )?[^\\n]*?` before an
NCCL message) and some end with one; each keeps threads alive on every byte.

For an unanchored search these parts change nothing about *whether* a pattern matches: if `X?Y`
matches, `Y` matches where X's span ends; if `Y` matches, `X?Y` matches with X empty (the same
for a trailing optional part, and for `.*` / `[^\\n]*` at either end, as lines hold no newline).
So the set runs each pattern with the optional atoms at the ends of each top-level alternative
removed; groups and values are still read with the full pattern, from the rules that matched.
Only atoms whose quantifier allows zero repetitions are removed, and the scan stops at anything
it does not understand (the pattern is then used as written).
"""

from __future__ import annotations

_ZERO_QUANTS = ("?", "*")


def _atom_end(p: str, i: int) -> int:
    """The index after the atom starting at p[i] (without its quantifier); -1 when unsure."""
    n = len(p)
    c = p[i]
    if c == "\\":
        if i + 1 >= n:
            return -1
        nxt = p[i + 1]
        if nxt in "xpP" and i + 2 < n and p[i + 2] == "{":
            close = p.find("}", i + 3)
            return -1 if close < 0 else close + 1
        if nxt == "x":
            return i + 4
        if nxt in "pP":
            return i + 3
        if nxt.isdigit() or nxt in "QE":  # octal/backreference, quoting: not worth the risk
            return -1
        return i + 2
    if c == "[":
        j = i + 1
        if j < n and p[j] == "^":
            j += 1
        if j < n and p[j] == "]":
            j += 1
        while j < n:
            if p[j] == "\\":
                j += 2
                continue
            if p[j] == "[" and p[j + 1:j + 2] == ":":  # [:alpha:]
                close = p.find(":]", j + 2)
                if close < 0:
                    return -1
                j = close + 2
                continue
            if p[j] == "]":
                return j + 1
            j += 1
        return -1
    if c == "(":
        depth, j = 0, i
        while j < n:
            ch = p[j]
            if ch == "\\":
                j += 2
                continue
            if ch == "[":
                end = _atom_end(p, j)
                if end < 0:
                    return -1
                j = end
                continue
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
                if depth == 0:
                    return j + 1
            j += 1
        return -1
    if c in ")|":
        return -1
    return i + 1


def _quant_end(p: str, j: int) -> tuple[int, bool]:
    """(index after the quantifier at p[j], whether it allows zero repetitions)."""
    n = len(p)
    if j >= n:
        return j, False
    c = p[j]
    zero = False
    if c in _ZERO_QUANTS:
        zero, j = True, j + 1
    elif c == "+":
        j += 1
    elif c == "{":
        close = p.find("}", j)
        body = p[j + 1:close] if close > 0 else ""
        lo = body.split(",")[0]
        if close < 0 or not lo.isdigit() or not all(part.isdigit() or part == "" for part in body.split(",")):
            return j, False  # a literal brace
        zero, j = int(lo) == 0, close + 1
    else:
        return j, False
    if j < n and p[j] in "?+":  # lazy (or possessive, which RE2 rejects anyway)
        j += 1
    return j, zero


def _atoms(branch: str) -> list[tuple[str, bool]] | None:
    """The branch as (atom with its quantifier, may be empty) pairs; None when unsure."""
    out: list[tuple[str, bool]] = []
    i, n = 0, len(branch)
    while i < n:
        if branch.startswith("(?", i) and (not branch.startswith(("(?:", "(?P<", "(?<"), i)
                                           or branch.startswith(("(?<=", "(?<!"), i)):
            return None  # inline flags (`(?i)`) or flag groups: they scope what follows
        end = _atom_end(branch, i)
        if end < 0:
            return None
        if branch[i] in "^$":
            q_end, zero = end, False
        else:
            q_end, zero = _quant_end(branch, end)
        out.append((branch[i:q_end], zero))
        i = q_end
    return out


def _branches(p: str) -> list[str] | None:
    """The top-level alternatives of p; None when its brackets do not balance."""
    out, start, i, n = [], 0, 0, len(p)
    while i < n:
        c = p[i]
        if c == "|":
            out.append(p[start:i])
            start = i + 1
            i += 1
            continue
        if c in "([\\":
            end = _atom_end(p, i)
            if end < 0:
                return None
            i = end
            continue
        if c == ")":
            return None
        i += 1
    out.append(p[start:])
    return out


def _trim_branch(branch: str) -> str:
    atoms = _atoms(branch)
    if atoms is None:
        return branch
    lo, hi = 0, len(atoms)
    while lo < hi and atoms[lo][1]:
        lo += 1
    while hi > lo and atoms[hi - 1][1]:
        hi -= 1
    if lo == 0 and hi == len(atoms):
        if len(atoms) == 1 and atoms[0][0].startswith("(?:") and atoms[0][0].endswith(")"):
            inner = atoms[0][0][3:-1]  # one plain group: trim inside it
            return f"(?:{set_form(inner)})"
        return branch
    return "".join(a for a, _ in atoms[lo:hi])


def set_form(pattern: str) -> str:
    """`pattern` as an RE2 set runs it: matches exactly the lines `pattern` matches somewhere,
    with the optional atoms at the ends of each alternative removed (see the module doc)."""
    if pattern.startswith("(?i:") and _atom_end(pattern, 0) == len(pattern):
        return f"(?i:{set_form(pattern[4:-1])})"
    branches = _branches(pattern)
    if branches is None:
        return pattern
    return "|".join(_trim_branch(b) for b in branches)
