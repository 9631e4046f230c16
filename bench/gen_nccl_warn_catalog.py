"""Generate rules/catalog_nccl_warn.yaml from an NCCL source tree: every `WARN("...")` format string
classed by the ncclResult_t the code returns after it.

NCCL reports a failure as a `NCCL WARN <message>` line and then returns one of its result codes;
the code is NCCL's own class of the failure (ncclInvalidArgument / ncclInvalidUsage: the program
or the launch is wrong; ncclSystemError: a system call or the network failed on this host;
ncclRemoteError: a peer went away). This script reads each WARN's format string and the first
`return ncclX` / `ret = ncclX` of the statements after it (up to the end of its block), turns the
format into a regex (each conversion a lazy wildcard) and writes one rule per class whose pattern
is the alternation of its formats. A format whose literal text is under 12 letters is left out
(`%s:%d -> %d` types nothing). The rules sit just above `nccl-warn-generic` (priority 12): every
dedicated NCCL rule outranks them; they only class a WARN line that would otherwise stay an
untyped NCCL warning.

ncclInternalError's WARNs (189 at the pinned commit) are left out: "an internal check failed"
says neither whose fault it is nor what a restart does (the labelled logs that print one are a
NIC or topology set-up, a usage error and a lost peer), and every format costs start-up time
(the patterns are compiled at each start). rules/nccl.yaml's `nccl-internal-error` types the
`internal error` that NCCL's callers print.

A log comes from whatever NCCL its job was built with, and NCCL rewords its WARNs from release
to release (2.9's `Net : Connection closed by remote peer`, 2.15's `... remote peer %s`, 2.23's
`socketProgressOpt: ...`): given several versions, the catalog is the union of their formats, each
classed by the newest version that prints it (a format NCCL moved from ncclSystemError to
ncclRemoteError in 2.13 is a remote error).

Usage: python bench/gen_nccl_warn_catalog.py NCCL_SRC_DIR COMMIT > rules/catalog_nccl_warn.yaml
(NCCL_SRC_DIR: a checkout's `src/` parent, e.g. `git archive COMMIT src | tar x -C DIR`), or
python bench/gen_nccl_warn_catalog.py --versions ROOT TAG... (oldest first; ROOT/TAG/src each a
`git archive TAG src` of that release).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

_WARN = re.compile(r'\bWARN\(\s*"((?:[^"\\]|\\.)*)"')
_RESULT = re.compile(r"\b(?:return|ret\s*=|res\s*=|result\s*=)\s*(nccl(?:InvalidArgument|InvalidUsage|SystemError|InternalError|RemoteError))\b")
_CONVERSION = r"%[-+ #0-9.*]*(?:hh|h|ll|l|z|j|t|L)?[diouxXeEfgGcspn%]"
_SPLIT = re.compile("(" + _CONVERSION + r'|"\s*[A-Z_][A-Z0-9_]*\s*")')  # a conversion, or a macro pasted into the string
MIN_LETTERS = 12

CLASSES = {
    "usage": dict(codes=("ncclInvalidArgument", "ncclInvalidUsage"), error_type="RuntimeError", category="framework",
                  priority=16, action="no_retry", role=None,
                  hint="NCCL refused a call the program or the launch made wrongly (its WARN line says which argument or "
                       "usage; NCCL returned ncclInvalidArgument / ncclInvalidUsage): a restart fails the same way. Fix the "
                       "launch or the calls before restarting."),
    "system": dict(codes=("ncclSystemError",), error_type="NCCLRemoteError", category="infrastructure", priority=15,
                   action=None, role=None,
                   hint="A system call or the network failed inside NCCL on this host (NCCL returned ncclSystemError after "
                        "this WARN). Read the NET / socket lines around it (NCCL_DEBUG=INFO)."),
    "remote": dict(codes=("ncclRemoteError",), error_type="NCCLRemoteError", category="infrastructure", priority=14,
                   action=None, role="symptom",
                   hint="NCCL lost a peer (ncclRemoteError): a consequence of another rank's or host's failure; its own "
                        "log has the cause."),
}


def formats(src: Path) -> dict[str, list[str]]:
    """class name -> sorted, de-duplicated WARN formats."""
    by_code = {code: name for name, spec in CLASSES.items() for code in spec["codes"]}
    found: dict[str, set[str]] = {name: set() for name in CLASSES}
    for path in sorted([*src.rglob("*.cc"), *src.rglob("*.h"), *src.rglob("*.cu")]):
        text = path.read_text(errors="replace")
        for m in _WARN.finditer(text):
            block = text[m.end():m.end() + 400].split("}")[0]
            r = _RESULT.search(block)
            if r is None or r.group(1) not in by_code:
                continue
            fmt = m.group(1)
            if len(re.sub(r"[^A-Za-z]", "", re.sub(_CONVERSION, "", fmt))) < MIN_LETTERS:
                continue
            found[by_code[r.group(1)]].add(fmt)
    return {name: sorted(v) for name, v in found.items()}


def union(found_by_version: list[dict[str, list[str]]]) -> dict[str, list[str]]:
    """The formats of several versions (oldest first), each in the class of the newest version
    that prints it. Of two formats in different classes where one's literal text begins the
    other's (`... remote peer` in 2.9 a system error, `... remote peer %s` in 2.15 a remote one),
    a line of either would match both: the one a newer version prints keeps it."""
    last: dict[str, tuple[int, str]] = {}  # format -> (index of the newest version printing it, class)
    for i, found in enumerate(found_by_version):
        for name, fmts in found.items():
            for fmt in fmts:
                last[fmt] = (i, name)
    texts = {fmt: to_regex(fmt).rstrip() for fmt in last}
    out: dict[str, set[str]] = {name: set() for name in CLASSES}
    for fmt, (i, name) in last.items():
        overlaps = [j for other, (j, other_name) in last.items() if other_name != name
                    and (texts[other].startswith(texts[fmt]) or texts[fmt].startswith(texts[other]))]
        if all(j <= i for j in overlaps):  # (within one version both stay, as they always did)
            out[name].add(fmt)
    return {name: sorted(v) for name, v in out.items()}


def to_regex(fmt: str) -> str:
    """The format as a regex: its literal text up to the last literal run that makes it distinctive
    (a conversion is a lazy wildcard); what follows the first conversion after MIN_LETTERS letters of
    literal text is dropped, which keeps the catalog's patterns short (they are compiled at each
    start-up) without making them match other WARNs."""
    fmt = fmt.replace('\\"', '"').replace("\\n", "").replace("\\t", " ")
    out = []
    letters = 0
    for part in _SPLIT.split(fmt):
        if not part:
            continue
        if re.fullmatch(_CONVERSION, part) or re.fullmatch(r'"\s*[A-Z_][A-Z0-9_]*\s*"', part):
            if letters >= MIN_LETTERS:
                break
            out.append(".*?")
        else:
            out.append(re.escape(part.strip("\\")).replace("\\ ", " "))
            letters += len(re.sub(r"[^A-Za-z]", "", part))
    rx = "".join(out)
    while rx.endswith(".*?"):
        rx = rx[:-3]
    return rx


def example(fmt: str) -> str:
    text = fmt.replace('\\"', '"').replace("\\n", "")
    text = re.sub(r'"\s*[A-Z_][A-Z0-9_]*\s*"', "X", text)
    return "node1:101:202 [0] NCCL WARN " + re.sub(_CONVERSION, "7", text)


def yaml_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def main() -> None:
    if sys.argv[1] == "--versions":
        root, tags = Path(sys.argv[2]), sys.argv[3:]
        found = union([formats(root / tag / "src") for tag in tags])
        origin = f"NVIDIA/nccl releases {tags[0]} to {tags[-1]} ({len(tags)})"
        source = (f"  - \"NVIDIA/nccl releases {' '.join(tags)}: every WARN() format of src/ with the "
                  "ncclResult_t returned after it, the newest release's class for a format several print\"")
    else:
        src, commit = Path(sys.argv[1]), sys.argv[2]
        found = formats(src / "src")
        origin = "NVIDIA/nccl @" + commit
        source = f"  - \"NVIDIA/nccl @{commit}: every WARN() format of src/ with the ncclResult_t returned after it\""
    out = [
        "# GENERATED by bench/gen_nccl_warn_catalog.py from " + origin + "; do not edit by hand.",
        "kind: diagnosis",
        "family: nccl",
        "catalog: true",
        "source:",
        source,
        "description: >",
        "  NCCL's WARN lines classed by the result code NCCL returns after each (usage, system,",
        "  remote). Just above nccl-warn-generic: every dedicated NCCL rule outranks these; they class a",
        "  WARN line that would otherwise stay an untyped NCCL warning.",
        "rules:",
    ]
    for name, spec in CLASSES.items():
        fmts = found[name]
        if not fmts:
            continue
        alternation = "|".join(dict.fromkeys(to_regex(f) for f in fmts))
        out += [f"  - id: nccl-warn-{name}",
                f"    # {len(fmts)} WARN formats NCCL follows with {' / '.join(spec['codes'])}",
                f"    error_type: {spec['error_type']}",
                f"    category: {spec['category']}",
                f"    priority: {spec['priority']}"]
        if spec["role"]:
            out.append(f"    role: {spec['role']}")
        if spec["action"]:
            out.append(f"    action: {spec['action']}")
        pattern = r"\bNCCL WARN (?:" + alternation + ")"
        out += [f"    pattern: {yaml_str(pattern)}",
                f"    hint: {yaml_str(spec['hint'])}",
                "    examples:",
                "      match:"]
        out += [f"        - {yaml_str(example(f))}" for f in fmts[:2]]
        out += ["      no_match:", "        - 'node1:101:202 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>'", ""]
    sys.stdout.write("\n".join(out).rstrip() + "\n")


if __name__ == "__main__":
    main()
