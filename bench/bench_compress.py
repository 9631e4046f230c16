#!/usr/bin/env python3
"""Benchmark log compression and diagnosis on a generated pretraining log.

Measures, in one run:
  (a) baseline: `LC_ALL=C grep -c -v -E -f PATTERNS FILE` with the filter rules (rules/filters)
      converted to POSIX ERE: wall time, MB/s, peak RSS, lines kept;
  (b) `logdx compress FILE -o OUT --stats`: wall time, MB/s, peak RSS, compression ratio;
  (c) `logdx diagnose FILE --json`: wall time, peak RSS, and whether root cause, suspect host and
      evidence line equal the generator's truth sidecar (`FILE.truth.json`).
and prints a markdown table.

Why `grep -c` and not `grep -v ... > /dev/null`: GNU grep notices that its output is /dev/null
and stops at the first selected line, so that command measures nothing; `-c` scans the whole file.

    python bench/bench_compress.py                    # 500 MB log in bench/out/ (generated if missing)
    python bench/bench_compress.py --size-mb 2048     # the 2 GB run, for peak RSS
    python bench/bench_compress.py path/to/log [--rules DIR] [--json results.json]

Several log shapes in one run (each generated under --out-dir, measured, then deleted):

    python bench/bench_compress.py --shapes all --size-mb 500 --out-dir /tmp/logdx-shapes \
        --genlog ../shared/bench/genlog.py

The shapes: `gen_log` (this repo's generator), `genlog` (an independently written generator,
path given by --genlog; seed 7), `survive5`, `unfiltered`, `short` (bench/gen_shapes.py).
There the grep baseline writes its output to a file (`grep -v -E -f PATTERNS FILE > OUT`), as
a user filtering a log would, and `.zst` rows time the diagnosis of the zstd-compressed log
next to `zstd -q -t` on the same file: decoding alone, one core, with nothing else to do (the
floor of any diagnosis of a single-frame archive, which no decoder can split across cores).
Each command runs --repeat times (default 3), each right after the input was read once (a warm
page cache for every command alike), and the median is reported.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))

MiB = 1 << 20


@dataclass
class Result:
    step: str
    command: str
    wall_s: float | None = None
    mb_per_s: float | None = None
    peak_rss_mib: float | None = None
    detail: str = ""
    ok: bool | None = None
    extra: dict = field(default_factory=dict)


# ---- ERE conversion --------------------------------------------------------------------------
_ERE_SPECIAL = set(".[]()*+?{}|^$\\")
_CTRL = {"t": "\t", "n": "\n", "r": "\r", "f": "\f", "v": "\v"}
_CLASS_SHORTHANDS = {"d": "0-9", "s": "[:space:]", "w": "[:alnum:]_"}


class NotERE(ValueError):
    """The pattern uses a construct POSIX ERE (GNU grep -E) cannot express."""


def _escape_char(p: str, i: int) -> tuple[str, int]:
    """Decode `\\x` at p[i] (the backslash) to a literal character; return (char, next index)."""
    c = p[i + 1]
    if c == "x":
        return chr(int(p[i + 2:i + 4], 16)), i + 4
    if c in _CTRL:
        return _CTRL[c], i + 2
    if c.isalnum():
        raise NotERE(f"escape \\{c}")
    return c, i + 2


def _convert_class(p: str, i: int) -> tuple[str, int]:
    """Convert a bracket expression starting at p[i] == '['; return (ERE text, next index)."""
    j = i + 1
    negate = p[j:j + 1] == "^"
    if negate:
        j += 1
    items: list[str] = []
    literal: set[str] = set()
    first = True
    while j < len(p):
        c = p[j]
        if c == "]" and not first:
            break
        first = False
        if c == "\\":
            n = p[j + 1]
            if n in _CLASS_SHORTHANDS:
                items.append(_CLASS_SHORTHANDS[n])
                j += 2
                continue
            if n in "SDW":
                raise NotERE(f"negated shorthand \\{n} inside a class")
            ch, j = _escape_char(p, j)
            literal.add(ch)
            continue
        if j + 2 < len(p) and p[j + 1] == "-" and p[j + 2] != "]":
            hi = p[j + 2]
            if hi == "\\":
                hi, nxt = _escape_char(p, j + 2)
            else:
                nxt = j + 3
            items.append(f"{c}-{hi}")
            j = nxt
            continue
        literal.add(c)
        j += 1
    else:
        raise NotERE("unterminated class")
    # POSIX: ']' must come first, '-' last, '^' not first; backslash is literal.
    body = ("]" if "]" in literal else "") + "".join(items)
    body += "".join(sorted(ch for ch in literal if ch not in "]-^"))
    body += "^" if "^" in literal else ""
    body += "-" if "-" in literal else ""
    if body in ("^", "-^", "^-") and not negate:
        return "(" + "|".join("\\^" if ch == "^" else ch for ch in body) + ")", j + 1
    return "[" + ("^" if negate else "") + body + "]", j + 1


def to_ere(pattern: str) -> str:
    """Convert an RE2/`regex` pattern to GNU ERE with the same match/no-match decision.

    Named and non-capturing groups become plain groups, lazy quantifiers greedy (the set of
    matching lines is unchanged), `\\d \\s \\w \\xHH` are expanded. Lookarounds, backreferences,
    inline flags and `\\S \\D \\W` raise NotERE.
    """
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1]
            if nxt == "d":
                out.append("[0-9]"); i += 2; continue
            if nxt == "s":
                out.append("[[:space:]]"); i += 2; continue
            if nxt == "S":
                out.append("[^[:space:]]"); i += 2; continue
            if nxt == "w":
                out.append("[[:alnum:]_]"); i += 2; continue
            if nxt == "b":
                out.append("\\b"); i += 2; continue
            if nxt.isdigit():
                raise NotERE("backreference")
            ch, i = _escape_char(pattern, i)
            if ch in _ERE_SPECIAL and ch not in "]}":
                out.append("\\" + ch)
            else:
                out.append(ch)
            continue
        if c == "[":
            text, i = _convert_class(pattern, i)
            out.append(text)
            continue
        if c == "(" and pattern.startswith("(?", i):
            if pattern.startswith("(?P<", i):
                i = pattern.index(">", i) + 1
                out.append("(")
                continue
            if pattern.startswith("(?:", i):
                out.append("(")
                i += 3
                continue
            raise NotERE(f"construct {pattern[i:i + 4]!r} (lookaround or inline flag)")
        if c == "?" and out and out[-1] in ("*", "+", "?", "}") and not (len(out) > 1 and out[-2] == "\\"):
            i += 1  # lazy quantifier -> greedy
            continue
        if c == "}":
            out.append("}")
            i += 1
            if i < n and pattern[i] == "?":
                i += 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


@dataclass
class ERERule:
    rule_id: str
    ere: str | None
    note: str = ""


def _grep_matches(ere: str, lines: list[str]) -> list[bool]:
    if not lines:
        return []
    with tempfile.NamedTemporaryFile("w", suffix=".pat", delete=False, encoding="utf-8") as pf:
        pf.write(ere + "\n")
    try:
        res = []
        for line in lines:
            r = subprocess.run(["grep", "-q", "-E", "-f", pf.name], input=line.encode("utf-8") + b"\n",
                               env={**os.environ, "LC_ALL": "C"}, capture_output=True)
            if r.returncode == 2:
                raise NotERE(r.stderr.decode(errors="replace").strip())
            res.append(r.returncode == 0)
        return res
    finally:
        os.unlink(pf.name)


def convert_filter_rules(filters_dir: Path) -> list[ERERule]:
    """Every filter rule as ERE, checked against its own examples with grep."""
    out: list[ERERule] = []
    for path in sorted(filters_dir.rglob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(doc, dict) or doc.get("kind") != "filter":
            continue
        for rule in doc.get("rules") or []:
            rid = rule["id"]
            if rule.get("ignore_case"):
                out.append(ERERule(rid, None, "ignore_case: grep -i would apply to every pattern"))
                continue
            try:
                ere = to_ere(rule["pattern"])
                ex = rule.get("examples") or {}
                match, no_match = ex.get("match") or [], ex.get("no_match") or []
                got = _grep_matches(ere, match + no_match)
            except NotERE as exc:
                out.append(ERERule(rid, None, f"not expressible in ERE: {exc}"))
                continue
            wrong = [t for t, g in zip(match, got[:len(match)]) if not g]
            wrong += [t for t, g in zip(no_match, got[len(match):]) if g]
            note = f"approximate: {len(wrong)} example(s) decided differently" if wrong else ""
            out.append(ERERule(rid, ere, note))
    return out


# ---- process measurement ---------------------------------------------------------------------
@dataclass
class Run:
    rc: int
    wall_s: float
    peak_rss_mib: float | None
    stdout: bytes
    stderr: bytes
    cpu_s: float | None = None  # user + system CPU seconds (from /usr/bin/time)


def measure(cmd: list[str], *, env: dict | None = None, stdout_path: Path | None = None) -> Run:
    """Run `cmd`, returning wall time and peak RSS (via /usr/bin/time -v, else psutil polling)."""
    env = {**os.environ, **(env or {})}
    time_bin = shutil.which("time", path="/usr/bin:/bin")
    out_f = open(stdout_path, "wb") if stdout_path else subprocess.PIPE
    try:
        if time_bin:
            with tempfile.NamedTemporaryFile("r", suffix=".time", delete=False) as tf:
                tpath = tf.name
            t0 = time.perf_counter()
            p = subprocess.run([time_bin, "-v", "-o", tpath, *cmd], env=env, stdout=out_f, stderr=subprocess.PIPE)
            wall = time.perf_counter() - t0
            text = Path(tpath).read_text(errors="replace")
            os.unlink(tpath)
            m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
            rss = int(m.group(1)) / 1024 if m else None
            cpu = sum(float(x) for x in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", text)) or None
            return Run(p.returncode, wall, rss, p.stdout or b"", p.stderr, cpu)
        import psutil

        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=out_f, stderr=subprocess.PIPE)
        ps = psutil.Process(proc.pid)
        peak = 0
        while proc.poll() is None:
            try:
                rss = ps.memory_info().rss + sum(c.memory_info().rss for c in ps.children(recursive=True))
                peak = max(peak, rss)
            except psutil.Error:
                pass
            time.sleep(0.05)
        wall = time.perf_counter() - t0
        stdout, stderr = proc.communicate()
        return Run(proc.returncode, wall, peak / MiB if peak else None, stdout or b"", stderr)
    finally:
        if stdout_path:
            out_f.close()


def _first_json(data: bytes) -> dict | None:
    text = data.decode("utf-8", errors="replace")
    start = text.find("{")
    while start != -1:
        try:
            obj, _ = json.JSONDecoder().raw_decode(text[start:])
            if isinstance(obj, dict):
                return obj
        except json.JSONDecodeError:
            pass
        start = text.find("{", start + 1)
    return None


def find_logdx(explicit: str | None) -> str | None:
    if explicit:
        return explicit
    venv = REPO / ".venv" / "bin" / "logdx"
    if venv.exists():
        return str(venv)
    return shutil.which("logdx")


# ---- the three measurements ------------------------------------------------------------------
def bench_grep(log: Path, size_bytes: int, filters_dir: Path, workdir: Path) -> tuple[Result, list[ERERule]]:
    rules = convert_filter_rules(filters_dir)
    usable = [r for r in rules if r.ere]
    pat = workdir / "filters.ere"
    pat.write_text("".join(r.ere + "\n" for r in usable), encoding="utf-8")
    cmd = ["grep", "-c", "-v", "-E", "-f", str(pat), str(log)]
    shown = f"LC_ALL=C grep -c -v -E -f {pat.name} FILE"
    res = Result("grep baseline", shown)
    if log.suffix in (".gz", ".zst"):
        res.detail = "skipped: grep needs an uncompressed file"
        return res, rules
    run = measure(cmd, env={"LC_ALL": "C"})
    if run.rc not in (0, 1):
        res.detail = f"grep failed rc={run.rc}: {run.stderr.decode(errors='replace')[:300]}"
        return res, rules
    kept = int(run.stdout.strip() or 0)
    res.wall_s, res.peak_rss_mib = run.wall_s, run.peak_rss_mib
    res.mb_per_s = size_bytes / MiB / run.wall_s
    skipped = [r.rule_id for r in rules if not r.ere]
    approx = [r.rule_id for r in rules if r.ere and r.note]
    res.detail = f"{len(usable)}/{len(rules)} rules as ERE; {kept} lines kept (line drop only, no folding)"
    if skipped:
        res.detail += f"; skipped {skipped}"
    if approx:
        res.detail += f"; approximate {approx}"
    res.extra = {"lines_kept": kept, "patterns": len(usable), "skipped": skipped, "approximate": approx}
    return res, rules


def bench_compress(logdx: str | None, log: Path, size_bytes: int, workdir: Path, rules_dir: Path | None) -> Result:
    out = workdir / (log.name + ".logdx.txt")
    cmd = [logdx or "logdx", "compress", str(log), "-o", str(out), "--stats"]
    if rules_dir:
        cmd += ["--rules", str(rules_dir)]
    res = Result("logdx compress", "logdx compress FILE -o OUT --stats")
    if not logdx:
        res.detail = "skipped: logdx CLI not found (pip install -e . in the venv)"
        return res
    run = measure(cmd)
    if run.rc != 0:
        res.detail = f"skipped: logdx compress exited {run.rc}: {run.stderr.decode(errors='replace').strip()[:300]}"
        return res
    stats = _first_json(run.stderr) or _first_json(run.stdout) or {}
    res.wall_s, res.peak_rss_mib = run.wall_s, run.peak_rss_mib
    res.mb_per_s = size_bytes / MiB / run.wall_s
    bytes_out = stats.get("bytes_out") or (out.stat().st_size if out.exists() else 0)
    bytes_in = stats.get("bytes_in") or size_bytes
    ratio = stats.get("ratio") or (bytes_in / bytes_out if bytes_out else None)
    res.detail = (f"ratio {ratio:.0f}x ({bytes_in / MiB:.0f} MiB -> {bytes_out / 1024:.0f} KiB), "
                  f"{stats.get('lines_in', '?')} lines in, {stats.get('lines_kept', '?')} kept in "
                  f"{stats.get('templates', '?')} templates" if ratio else "no stats JSON found")
    res.ok = True
    res.extra = {"stats": stats, "ratio": ratio, "bytes_out": bytes_out}
    return res


def bench_diagnose(logdx: str | None, log: Path, size_bytes: int, truth: dict | None, rules_dir: Path | None) -> Result:
    cmd = [logdx or "logdx", "diagnose", str(log), "--json"]
    if rules_dir:
        cmd += ["--rules", str(rules_dir)]
    res = Result("logdx diagnose", "logdx diagnose FILE --json")
    if not logdx:
        res.detail = "skipped: logdx CLI not found"
        return res
    run = measure(cmd)
    diag = _first_json(run.stdout)
    if run.rc != 0 and diag is None:
        res.detail = f"skipped: logdx diagnose exited {run.rc}: {run.stderr.decode(errors='replace').strip()[:300]}"
        return res
    res.wall_s, res.peak_rss_mib = run.wall_s, run.peak_rss_mib
    res.mb_per_s = size_bytes / MiB / run.wall_s
    if not diag:
        res.detail = "no JSON on stdout"
        return res
    rc = diag.get("root_cause") or {}
    etype = rc.get("error_type")
    hosts = (diag.get("action") or {}).get("suspect_hosts") or []
    ev_lines = [e.get("line") for e in rc.get("evidence") or [] if isinstance(e, dict)]
    res.extra = {"error_type": etype, "suspect_hosts": hosts, "evidence_lines": ev_lines,
                 "action": (diag.get("action") or {}).get("kind"), "decided_by": diag.get("decided_by")}
    if truth is None:
        res.detail = f"root cause {etype}, suspect hosts {hosts} (no truth sidecar)"
        return res
    type_ok = etype == truth["root_cause"]
    host_ok = hosts == [truth["host"]]
    line_ok = truth["line"] in ev_lines
    line_note = "ok" if line_ok else f"{ev_lines} vs truth {truth['line']}"
    res.ok = type_ok and host_ok
    res.detail = (f"root cause {etype} ({'ok' if type_ok else 'WRONG, truth ' + truth['root_cause']}), "
                  f"suspect hosts {hosts} ({'ok' if host_ok else 'WRONG, truth ' + truth['host']}), "
                  f"evidence line {line_note}")
    return res


def table(results: list[Result], log: Path, size_bytes: int) -> str:
    lines = [f"Input: `{log.name}` ({size_bytes / MiB:.0f} MiB uncompressed)", "",
             "| step | wall s | MB/s | peak RSS MiB | result |", "|---|---:|---:|---:|---|"]
    for r in results:
        def f(v, fmt):
            return format(v, fmt) if v is not None else "–"
        lines.append(f"| {r.step} | {f(r.wall_s, '.2f')} | {f(r.mb_per_s, '.0f')} | {f(r.peak_rss_mib, '.0f')} | "
                     f"{' '.join(r.detail.split()).replace('|', '/')} |")
    return "\n".join(lines)


SHAPES = ("gen_log", "genlog", "survive5", "unfiltered", "short", "unknown")


def _generate_shape(shape: str, size_mb: float, out: Path, genlog: Path | None) -> bool:
    py = sys.executable
    if shape == "gen_log":
        cmd = [py, str(BENCH_DIR / "gen_log.py"), "--size-mb", str(size_mb), "--out", str(out)]
    elif shape == "genlog":
        if genlog is None or not genlog.exists():
            return False
        # genlog.py counts MB as 10^6 bytes; ask for the same MiB as the others
        cmd = [py, str(genlog), "--size-mb", str(size_mb * MiB / 1e6), "--seed", "7", "--out", str(out)]
    else:
        cmd = [py, str(BENCH_DIR / "gen_shapes.py"), shape, "--size-mb", str(size_mb), "--out", str(out)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return True


def _grep_to_file(log: Path, pat: Path, workdir: Path) -> Run:
    return measure(["grep", "-v", "-E", "-f", str(pat), str(log)], env={"LC_ALL": "C"},
                   stdout_path=workdir / "grep.out")


def warm(path: Path) -> None:
    """Read the file once so the timed command finds it in the page cache. A VM may reclaim
    cached pages of idle files in the background; without this, whichever command runs first
    on a shape pays for the disk reads (grep, in this table)."""
    with open(path, "rb", buffering=0) as fh:
        buf = bytearray(8 * MiB)
        while fh.readinto(buf):
            pass


def median_run(make_run, path: Path, repeat: int) -> Run:
    """The run with the median wall time of `repeat` runs, each on a warm page cache; its peak
    RSS is the highest of all runs."""
    runs = []
    for _ in range(repeat):
        warm(path)
        runs.append(make_run())
    runs.sort(key=lambda r: r.wall_s)
    mid = runs[len(runs) // 2]
    rss = [r.peak_rss_mib for r in runs if r.peak_rss_mib is not None]
    return Run(mid.rc, mid.wall_s, max(rss) if rss else None, mid.stdout, mid.stderr, mid.cpu_s)


def run_shapes(args, logdx: str | None) -> int:
    """Every shape at one size: grep (to a file), logdx compress, logdx diagnose (+ .zst)."""
    shapes = SHAPES if args.shapes == "all" else tuple(args.shapes.split(","))
    out_dir = args.out_dir or Path(tempfile.mkdtemp(prefix="logdx-shapes-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="logdx-bench-"))
    rules = convert_filter_rules(args.filters)
    pat = workdir / "filters.ere"
    pat.write_text("".join(r.ere + "\n" for r in rules if r.ere), encoding="utf-8")
    rows = []
    records: list[dict] = []  # the same figures for --json
    try:
        for shape in shapes:
            log = out_dir / f"{shape}-{args.size_mb:g}mb.log"
            if args.reuse and log.exists():
                pass  # generated by an earlier --reuse run (the generators are deterministic)
            elif not _generate_shape(shape, args.size_mb, log, args.genlog):
                rows.append(f"| {shape} | skipped: generator not found (--genlog) |" + " |" * 8)
                continue
            size = log.stat().st_size
            load = os.getloadavg()[0]
            rep = args.repeat
            g = median_run(lambda: _grep_to_file(log, pat, workdir), log, rep)
            c = median_run(lambda: measure([logdx or "logdx", "compress", str(log), "-o", str(workdir / "out.txt"),
                                            "--stats"]), log, rep)
            stats = _first_json(c.stderr) or {}
            zst_s = diag_s = "–"
            record = {"shape": shape, "mib": round(size / MiB, 1), "lines_in": stats.get("lines_in"),
                      "lines_kept": stats.get("lines_kept"), "grep_s": g.wall_s, "grep_cpu_s": g.cpu_s,
                      "compress_s": c.wall_s, "compress_cpu_s": c.cpu_s, "vs_grep": g.wall_s / c.wall_s,
                      "peak_rss_mib": c.peak_rss_mib, "load": load, "repeat": rep}
            if "diagnose" not in args.skip:
                d = median_run(lambda: measure([logdx or "logdx", "diagnose", str(log), "--json"]), log, rep)
                diag = _first_json(d.stdout) or {}
                rc = diag.get("root_cause") or {}
                ev = (rc.get("evidence") or [{}])[0]
                diag_s = f"{d.wall_s:.2f} ({rc.get('error_type')} rank {ev.get('rank')} host {ev.get('host')})"
                record.update(diagnose_s=d.wall_s, diagnose_cpu_s=d.cpu_s,
                              found={"error_type": rc.get("error_type"), "rank": ev.get("rank"), "host": ev.get("host")})
            if args.zst and "diagnose" not in args.skip:
                zlog = Path(str(log) + ".zst")
                if not (args.reuse and zlog.exists()):
                    subprocess.run(["zstd", "-q", "-T0", "-3", "-f", str(log), "-o", str(zlog)], check=True)
                z = median_run(lambda: measure([logdx or "logdx", "diagnose", str(zlog), "--json"]), zlog, rep)
                floor = median_run(lambda: measure(["zstd", "-q", "-t", str(zlog)]), zlog, rep)
                zst_s = f"{z.wall_s:.2f} ({z.wall_s / d.wall_s:.2f}×; decode alone {floor.wall_s:.2f})"
                record.update(zst_diagnose_s=z.wall_s, zst_vs_plain=z.wall_s / d.wall_s,
                              zst_decode_alone_s=floor.wall_s, zst_diagnose_cpu_s=z.cpu_s)
                if not args.reuse:
                    zlog.unlink()
            mib = size / MiB
            rows.append(
                f"| {shape} | {mib:.0f} | {stats.get('lines_in', '?')} / {stats.get('lines_kept', '?')} | "
                f"{g.wall_s:.2f} ({g.cpu_s or 0:.2f}) | {c.wall_s:.2f} ({c.cpu_s or 0:.2f}) | "
                f"**{g.wall_s / c.wall_s:.2f}×** | {c.peak_rss_mib:.0f} | "
                f"{diag_s} | {zst_s} | {mib / c.wall_s:.0f} | {load:.1f} |")
            records.append(record)
            print(rows[-1], file=sys.stderr)
            if not (args.keep_output or args.reuse):
                log.unlink()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print("| shape | MiB | lines in / kept | grep s (CPU s) | compress s (CPU s) | vs grep | RSS MiB | diagnose s (found) "
          "| .zst diagnose s (vs plain; zstd -t s) | MiB/s | load |")
    print("|---|---:|---|---:|---:|---:|---:|---|---|---:|---:|")
    print("\n".join(rows))
    print(f"\n(machine: {os.cpu_count()} CPUs; load = 1-min load average before each shape; every time is the "
          f"median of {args.repeat} runs, each on a warm page cache)")
    if args.json:
        args.json.write_text(json.dumps({"size_mb": args.size_mb, "cpus": os.cpu_count(), "shapes": records},
                                        indent=2) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", nargs="?", type=Path, help="log to measure (default: generated into bench/out/)")
    ap.add_argument("--size-mb", type=float, default=500.0, help="size of the generated log (default 500)")
    ap.add_argument("--big", action="store_true", help="the 2 GB run (same as --size-mb 2048), for peak RSS")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rules", type=Path, default=None, help="rules directory passed to logdx (--rules)")
    ap.add_argument("--filters", type=Path, default=REPO / "rules" / "filters", help="filter rules for the grep baseline")
    ap.add_argument("--logdx", default=None, help="path of the logdx executable")
    ap.add_argument("--skip", action="append", default=[], choices=["grep", "compress", "diagnose"])
    ap.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    ap.add_argument("--keep-output", action="store_true", help="keep the compressed output next to the log")
    ap.add_argument("--shapes", default=None, help=f"comma-separated shapes, or all: {', '.join(SHAPES)}")
    ap.add_argument("--out-dir", type=Path, default=None, help="where --shapes generates its logs")
    ap.add_argument("--genlog", type=Path, default=None, help="the independent genlog.py generator")
    ap.add_argument("--zst", action="store_true", help="with --shapes: also diagnose a .zst of each log")
    ap.add_argument("--repeat", type=int, default=3,
                    help="with --shapes: runs per command (the median is reported), each after reading the input once")
    ap.add_argument("--reuse", action="store_true",
                    help="with --shapes: keep the generated logs in --out-dir and reuse them in later runs")
    args = ap.parse_args(argv)
    # an installed package has its bytecode; where PYTHONDONTWRITEBYTECODE is set every run would
    # compile the modules edited since their last .pyc again (a few ms of each start-up)
    compileall.compile_dir(REPO / "app", quiet=1)
    if args.shapes:
        return run_shapes(args, find_logdx(args.logdx))

    size_mb = 2048.0 if args.big else args.size_mb
    log = args.log
    if log is None:
        log = BENCH_DIR / "out" / f"pretrain-{size_mb:g}mb.log"
        if not log.exists() or not Path(str(log) + ".truth.json").exists():
            from gen_log import generate

            print(f"generating {log} ...", file=sys.stderr)
            truth = generate(log, size_mb, seed=args.seed)
            print(f"  {truth['bytes_uncompressed'] / MiB:.0f} MiB in {truth['gen_seconds']} s "
                  f"({truth['gen_mb_per_s']} MiB/s)", file=sys.stderr)
    if not log.exists():
        ap.error(f"{log} does not exist")
    truth_path = Path(str(log) + ".truth.json")
    truth = json.loads(truth_path.read_text()) if truth_path.exists() else None
    size_bytes = (truth or {}).get("bytes_uncompressed") or log.stat().st_size

    logdx = find_logdx(args.logdx)
    results: list[Result] = []
    ere_rules: list[ERERule] = []
    workdir = Path(tempfile.mkdtemp(prefix="logdx-bench-"))
    try:
        if "grep" not in args.skip:
            res, ere_rules = bench_grep(log, size_bytes, args.filters, workdir)
            results.append(res)
        if "compress" not in args.skip:
            results.append(bench_compress(logdx, log, size_bytes, workdir, args.rules))
            if args.keep_output and (workdir / (log.name + ".logdx.txt")).exists():
                shutil.copy(workdir / (log.name + ".logdx.txt"), log.parent / (log.name + ".logdx.txt"))
        if "diagnose" not in args.skip:
            results.append(bench_diagnose(logdx, log, size_bytes, truth, args.rules))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    print(table(results, log, size_bytes))
    notes = [f"- {r.rule_id}: {r.note}" for r in ere_rules if r.note]
    if notes:
        print("\nERE conversion notes:\n" + "\n".join(notes))
    print(f"\n(machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; other processes may share it)")
    if args.json:
        args.json.write_text(json.dumps({"log": str(log), "bytes": size_bytes, "truth": truth,
                                         "results": [asdict(r) for r in results]}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
