from __future__ import annotations

import io
import math
import os
import pickle
from pathlib import Path

import pytest

from app.core import compress as compress_mod
from app.core.compress import ShapeTable
from app.core.compress import compress_source as _compress_source
from app.core.fields import host_match, rank_match
from app.core.keptshapes import field_ranges, relax_digits, variant_key
from app.core.rules import load_rules

RULES_MIN = Path(__file__).resolve().parents[1] / "data" / "rules_min"


@pytest.fixture(scope="module")
def rules_min():
    return load_rules(RULES_MIN)


# every test runs on the C scan loop and on the pure-Python fallback: results must be identical
@pytest.fixture(params=["c", "python"])
def compress_source(request):
    if request.param == "c" and ShapeTable is None:
        pytest.skip("C scan loop not built")
    use_c = request.param == "c"

    def run(*args, **kwargs):
        return _compress_source(*args, use_c=use_c, **kwargs)

    return run


def megatron(step: int, loss: str = "2.345E+00", host: str = "node-01") -> str:
    return (f"{host}: iteration {step:8d}/  500000 | consumed samples: {step * 512:10d} | "
            f"lm loss: {loss} | loss scale: 65536.0 | number of nan iterations: 0 |")


def make_log(n_steps: int = 2000) -> str:
    lines = [f"node-0{r % 4}:{100 + r}:{200 + r} [{r % 8}] NCCL INFO Channel 00/02 : 0 1" for r in range(16)]
    lines += ["UserWarning: something deprecated"] * 3
    lines += [megatron(i, f"{3 - i / 1000:.4E}") for i in range(1, n_steps + 1)]
    lines += ["[rank5]: Traceback (most recent call last):",
              "[rank5]:   File \"train.py\", line 10, in <module>",
              "[rank5]: RuntimeError: CUDA error: uncorrectable ECC error encountered"]
    lines += [f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=77, OpType=ALLREDUCE)"
              for r in range(8) if r != 5]
    return "\n".join(lines) + "\n"


def test_drops_metrics_and_keeps_errors_with_context(rules_min, compress_source):
    log = compress_source(io.BytesIO(make_log().encode()), rules_min)
    s = log.stats
    assert s.lines_in == 16 + 2000 + 3 + 3 + 7
    assert s.dropped_by_rule == {"t-iter": 2000, "t-nccl-info": 16}
    assert s.lines_dropped + s.lines_kept == s.lines_in
    text = log.text
    assert "uncorrectable ECC error encountered" in text
    assert "iteration     1000/" not in text
    # the error line is kept verbatim and flagged; the watchdog timeouts fold into one template
    watchdog = [t for t in log.templates if "Watchdog" in t.text]
    assert len(watchdog) == 1 and watchdog[0].count == 7
    assert "×7" in text and "ranks[0,1,2,3,4,6,7]" in text
    # a dropped metric line right before the failure is kept as context
    assert any("iteration     2000/" in v for v in log.context.values())
    # last progress marker = the last iteration line
    assert log.last_progress is not None and log.last_progress.step == 2000
    assert log.last_progress.line == 16 + 3 + 2000


def test_repeated_lines_fold_with_counts_and_line_range(rules_min, compress_source):
    lines = [f"node-{i % 3}: WARNING step {i} took {i * 7} ms on host node-{i % 3}" for i in range(100)]
    log = compress_source(io.BytesIO(("\n".join(lines) + "\n").encode()), rules_min)
    assert len(log.templates) == 1
    t = log.templates[0]
    assert (t.count, t.first_line, t.last_line) == (100, 1, 100)
    assert t.hosts == {"node-0", "node-1", "node-2"}


def test_metric_series_nan_and_spike(rules_min, compress_source):
    lines = [megatron(i, "2.0E+00") for i in range(1, 50)]
    lines.append(megatron(50, "nan"))
    log = compress_source(io.BytesIO(("\n".join(lines) + "\n").encode()), rules_min)
    assert [p.line for p in log.nan_points] == [50]
    assert all(not math.isnan(p.values["loss"]) for p in log.metrics)
    assert len(log.metrics) >= 2


def test_carriage_return_progress_bars_are_split(rules_min, compress_source):
    bar = "\r".join(f"  {p}%|{'█' * (p // 10)}     | {p}/100 [00:01<00:20,  4.6it/s]" for p in range(0, 101, 5))
    data = (bar + "\rRuntimeError: CUDA error: uncorrectable ECC error encountered\n").encode()
    log = compress_source(io.BytesIO(data), rules_min)
    # one line (LF-separated): kept, because one of its segments is an error
    assert (log.stats.lines_in, log.stats.lines_kept, log.stats.lines_dropped) == (1, 1, 0)
    assert [o.line for o in log.occurrences] == [1]
    assert "4.6it/s" not in log.text


def test_line_counts_add_up_with_carriage_returns(rules_min, compress_source):
    """lines_in counts LF-separated lines; the \\r segments of a line are parts of it, so a line
    is kept once (any segment kept) or dropped once (every segment dropped)."""
    bar = "\r".join(f"  {p}%|{'#' * (p // 10)}| {p}/100 [00:01<00:20,  4.6it/s]" for p in range(0, 101, 10))
    lines = [bar] * 5  # dropped: every segment is a progress bar
    lines += ["loading shard 1\rloading shard 2\rloading shard 3"] * 4  # kept: three kept segments
    lines += [bar + "\rKeyError: 'lr'"]  # kept: one error segment
    lines += ["\r\r", "plain line", ""]  # blank segments only: an ordinary line
    log = compress_source(io.BytesIO(("\n".join(lines) + "\n").encode()), rules_min)
    s = log.stats
    assert s.lines_in == 13
    assert (s.lines_kept, s.lines_dropped) == (8, 5)
    assert s.dropped_by_rule == {"t-tqdm": 5}
    assert sum(t.count for t in log.templates) >= s.lines_kept  # templates count segments


def test_line_counts_add_up_on_random_bytes(rules_min, compress_source):
    import random

    data = random.Random(1).randbytes(1 << 20)
    s = compress_source(io.BytesIO(data), rules_min).stats
    assert s.lines_in == data.count(b"\n") + (not data.endswith(b"\n"))
    assert s.lines_kept + s.lines_dropped <= s.lines_in
    assert s.lines_kept <= s.lines_in


def test_bad_bytes_never_crash(rules_min, compress_source):
    # (inside binary junk a line is read when it looks like text: >= 16 bytes, <= 10% invalid UTF-8)
    junk = (bytes(b for b in range(256) if b != 10) * 4000 + b"\x00\x00\nKeyError: \xff\xfe 'optimizer.lr_scale'\n"
            + b"\xc3\x28" * 10)
    log = compress_source(io.BytesIO(junk), rules_min)
    assert log.stats.lines_in == 3
    assert any("KeyError" in o.text for o in log.occurrences)
    assert "\x00" not in log.text


def test_ten_megabyte_line_is_cut(rules_min, compress_source):
    data = b"a" * (10 * 1024 * 1024) + b"\nKeyError: 'optimizer'\n"
    log = compress_source(io.BytesIO(data), rules_min)
    assert log.stats.lines_in == 2
    assert log.stats.lines_cut == 1
    assert len(log.text) < 200_000
    assert log.occurrences[0].line == 2


def test_parallel_ranges_give_the_same_result_as_one_stream(tmp_path, rules_min, monkeypatch, compress_source):
    path = tmp_path / "big.log"
    path.write_text(make_log(20_000))
    sequential = compress_source(path, rules_min, workers=1)
    monkeypatch.setattr(compress_mod, "PARALLEL_MIN_BYTES", 1)
    parallel = compress_source(path, rules_min, workers=2, chunk_size=256 * 1024)
    assert parallel.stats.to_json_dict() == sequential.stats.to_json_dict()
    assert [(t.text, t.count, t.first_line, t.last_line) for t in parallel.templates] == \
           [(t.text, t.count, t.first_line, t.last_line) for t in sequential.templates]
    assert [o.line for o in parallel.occurrences] == [o.line for o in sequential.occurrences]
    assert parallel.last_progress == sequential.last_progress


def test_a_pickled_partial_merges_like_the_one_it_came_from(rules_min):
    """A range worker's findings reach the parent pickled, templates as rows (Partial.__getstate__):
    merged or read back, they must be the same templates, ranks, hosts, flags and line numbers."""
    from app.core.compressed import merge_partials
    from app.core.compressor import Compressor

    def template_facts(part):
        return {k: (t.text, t.first_line, t.last_line, t.count, sorted(t.ranks), sorted(t.hosts), t.flagged,
                    t.last_line_text) for k, t in part.templates.items()}

    lines = make_log(300).encode().splitlines(keepends=True)
    lines.insert(-8, (megatron(301, "nan") + "\n").encode())  # (a NaN point travels too)
    halves = [b"".join(lines[: len(lines) // 2]), b"".join(lines[len(lines) // 2:])]

    def partials():
        out = []
        for half in halves:
            comp = Compressor(rules_min)
            comp.feed(half)
            out.append(comp.partial())
        return out

    direct = merge_partials(partials())
    first, second = partials()
    travelled = pickle.loads(pickle.dumps(second))
    assert "templates" not in vars(travelled)  # (still rows: merged without Template objects)
    assert template_facts(pickle.loads(pickle.dumps(second))) == template_facts(partials()[1])
    merged = merge_partials([first, travelled])
    assert template_facts(merged) == template_facts(direct)
    assert any(len(t.ranks) > 1 for t in merged.templates.values())  # (the rows carried rank sets)
    assert merged.lines_in == direct.lines_in and merged.lines_kept == direct.lines_kept

    def points(series):  # (metric points travel as rows as well; repr: a NaN equals no NaN)
        return [(p.line, p.step, repr(p.values), p.text) for p in series]

    assert points(merged.metrics) == points(direct.metrics) and len(direct.metrics) > 20
    assert points(merged.nan_points) == points(direct.nan_points) and len(direct.nan_points) == 1
    again = pickle.loads(pickle.dumps(second))
    assert points(again.metrics) == points(partials()[1].metrics)
    assert all(type(p).__name__ == "MetricPoint" for p in again.metrics + again.nan_points)


@pytest.mark.skipif(ShapeTable is None, reason="C scan loop not built")
def test_c_and_python_scan_loops_agree_across_chunk_boundaries(ruleset):
    src = Path(__file__).resolve().parents[1] / "golden" / "compress" / "multistack" / "input.log"
    data = src.read_bytes() * 20
    results = [_compress_source(io.BytesIO(data), ruleset, chunk_size=4096, use_c=c) for c in (True, False)]
    fast, pure = results
    assert fast.stats.to_json_dict() == pure.stats.to_json_dict()
    assert fast.text == pure.text
    assert [(o.line, o.rule.id) for o in fast.occurrences] == [(o.line, o.rule.id) for o in pure.occurrences]
    assert fast.last_progress == pure.last_progress
    assert [p.line for p in fast.nan_points] == [p.line for p in pure.nan_points]


@pytest.mark.skipif(ShapeTable is None, reason="C scan loop not built")
def test_c_shape_hash_ignores_digits_of_any_width_in_long_lines():
    table = ShapeTable(2)
    head, tail = b"node-01: " + b"x" * 300, b" | " + b"y" * 300
    table.add(head + b" loss 1.5" + tail, 1)
    assert table.has(head + b" loss 123.4567" + tail)  # digit runs of another width, past a block edge
    assert not table.has(head + b" loss 1.5" + tail[:-1] + b"z")
    assert not table.has(head + b" lossy 1.5" + tail)
    n, survivors, samples, progress, n_extract = table.scan(head + b" loss 9.9" + tail + b"\nother\n", 1)
    assert n == 2 and [s[0] for s in survivors] == [1] and table.counts()[1] == 1


@pytest.mark.skipif(ShapeTable is None, reason="C scan loop not built")
def test_vector_and_byte_compaction_hash_every_shape_the_same():
    """Every compaction this CPU can run (AVX-512 64 bytes a step, SSSE3 16 bytes a step, the
    byte loop) must give one hash per shape: tables built with one are probed with each other, at
    every length around the 16-, 32- and 64-byte steps and the 256-byte blocks, with digits at
    random places (and bytes that are not ASCII)."""
    import random

    from app.core._shapescan import set_simd, simd_levels

    levels = simd_levels()
    assert levels[0] == 0
    rnd = random.Random(7)
    alphabet = b"ab :=[]|.-_/\t\x80\xff"
    previous = set_simd(True)
    try:
        for n in [*range(0, 70), *range(120, 135), *range(240, 330), 511, 512, 513, 700]:
            shape = bytes(rnd.choice(alphabet) for _ in range(n))
            with_digits = bytearray()
            for c in shape:
                if rnd.random() < 0.3:
                    with_digits += str(rnd.randrange(10 ** rnd.randrange(1, 12))).encode()
                with_digits.append(c)
            for build in levels:
                set_simd(build)
                table = ShapeTable(1)
                table.add(shape, 0)
                for probe in levels:
                    set_simd(probe)
                    assert table.has(bytes(with_digits)), (n, build, probe)
                    assert not table.has(shape + b"x"), (n, build, probe)
    finally:
        set_simd(previous)


def test_set_simd_falls_back_to_a_level_the_cpu_has():
    from app.core._shapescan import set_simd, simd_levels

    best = simd_levels()[-1]
    previous = set_simd(True)
    try:
        assert set_simd(99) == best  # True chose the best level
        assert set_simd(False) == best  # 99 fell back to it
        assert set_simd(best) == 0
    finally:
        set_simd(previous)


def test_the_c_scan_loop_is_built():
    """The C loop is optional at install time but CI must build it: a silent fallback would
    only show up as a 3x slower benchmark. Set LOGDX_ALLOW_PURE_PYTHON=1 where no compiler exists."""
    if os.environ.get("LOGDX_ALLOW_PURE_PYTHON") == "1":
        pytest.skip("pure-Python scan loop allowed here")
    assert ShapeTable is not None, "app/core/_shapescan.c did not build; `pip install -e .` prints why"


def kept_log(reps: int = 50) -> str:
    """Plain surviving lines from 64 ranks on 8 hosts: counted per shape, not per line."""
    lines = []
    for step in range(reps):
        for r in range(64):
            lines.append(f"node-{r // 8:02d}: [rank{r}]: dataloader worker {step % 7} prefetched {step * 13} batches")
    lines.append("node-03: [rank27]: worker: Cannot allocate memory (errno 11)")
    lines += ["node-03: [rank27]: worker: Cannot allocate memory (errno 11)"] * 10
    lines.append("node-03: [rank27]: worker: Cannot allocate memory (errno 12)")
    return "\n".join(lines) + "\n"


def test_kept_lines_of_a_known_shape_keep_every_rank_host_and_count(ruleset, compress_source):
    log = compress_source(io.BytesIO(kept_log().encode()), ruleset, chunk_size=64 * 1024)
    tpl = next(t for t in log.templates if "prefetched" in t.text)
    assert tpl.count == 50 * 64
    assert tpl.ranks == set(range(64))
    assert tpl.hosts == {f"node-{h:02d}" for h in range(8)}
    assert tpl.last_line == 50 * 64
    assert tpl.last_line_text == "node-07: [rank63]: dataloader worker 0 prefetched 637 batches"
    assert log.stats.lines_kept + log.stats.lines_dropped == log.stats.lines_in


def test_ranks_past_a_templates_cap_still_count_as_seen(ruleset, compress_source):
    """A template keeps at most MAX_SET_MEMBERS ranks, but every rank that printed goes into the
    log's known ranks (a missing one would look silent to the hang/timeout reasoning)."""
    from app.core.compressed import MAX_SET_MEMBERS

    lines = [f"node-{r // 8:03d}: [rank{r}]: dataloader worker {s} prefetched {s * 13} batches"
             for s in range(3) for r in range(1200)]
    log = compress_source(io.BytesIO(("\n".join(lines) + "\n").encode()), ruleset, chunk_size=64 * 1024)
    tpl = next(t for t in log.templates if "prefetched" in t.text)
    assert tpl.count == 3 * 1200
    assert len(tpl.ranks) == MAX_SET_MEMBERS and tpl.ranks <= set(range(1200))
    assert len(tpl.hosts) == 150
    assert set(range(1200)) <= set(log.known_ranks)


def test_kept_lines_behind_ip_prefixes_keep_every_host(ruleset, compress_source):
    """pdsh / DeepSpeed's multi-node runner prefix each line with the node's IP: a plain shape
    recurring on 8 nodes names all 8 (and only them) in both scan loops."""
    ips = [f"10.0.{(n + 11) // 256}.{(n + 11) % 256}" for n in range(250, 258)]  # crosses 10.0.1.x
    lines = [f"{ips[r // 8]}: [rank{r}]: dataloader worker {step % 7} prefetched {step * 13} batches"
             for step in range(30) for r in range(64)]
    log = compress_source(io.BytesIO(("\n".join(lines) + "\n").encode()), ruleset, chunk_size=16 * 1024)
    tpl = next(t for t in log.templates if "prefetched" in t.text)
    assert tpl.count == 30 * 64
    assert tpl.hosts == set(ips)
    assert tpl.ranks == set(range(64))
    assert set(log.known_hosts) == set(ips)


def test_a_digit_that_makes_a_known_plain_shape_an_error_is_still_diagnosed(ruleset, compress_source):
    """`(errno 11)` is plain, `(errno 12)` is cpp-bad-alloc: same shape, so the shape must not be
    counted blindly."""
    log = compress_source(io.BytesIO(kept_log(2).encode()), ruleset)
    assert [o.rule.id for o in log.occurrences] == ["cpp-bad-alloc"]
    assert log.occurrences[0].line == 2 * 64 + 12


@pytest.mark.skipif(ShapeTable is None, reason="C scan loop not built")
def test_c_loop_counts_kept_shapes_and_resumes_after_a_batch():
    table = ShapeTable(1)
    line = b"node-01: [rank3]: plain 7"
    fields = field_ranges(line, line.decode(), rank_match(line.decode()), host_match(line.decode()))
    assert fields == (12, 12, 1, 5, 0)  # rank digits after 12 non-digits; host digits after 1..5
    slot = table.add_keep(line, *fields)
    assert slot == 0 and not table.has(line)
    chunk = b"\n".join([b"node-01: [rank3]: plain 9", b"node-02: [rank3]: plain 1", b"new a", b"new b",
                        b"node-01: [rank4]: plain 5", b"node-01: [rank3]: plain 2"]) + b"\n"
    # a batch ends after 2 lines of unknown shape; lines of the kept shape are counted, and the
    # rank/host of a new variant recorded, in C
    idx, end, survivors, _, _, _ = table.scan_from(chunk, 0, 0, 1, 1, 0, 2)
    assert [s[0] for s in survivors] == [2, 3]  # the two unknown shapes
    idx, end, survivors, _, _, _ = table.scan_from(chunk, end, idx, 1, 1, 0, 0)
    assert idx == 6 and end == len(chunk) and survivors == []
    assert table.keep_counts() == [(4, 6)]  # every line of the kept shape, variants included
    names, per_slot = table.keep_sets()
    ranks, host_ids = per_slot[0]
    assert sorted(ranks) == [3, 4] and sorted(names[h] for h in host_ids) == [b"node-01", b"node-02"]
    assert table.probe_keep(b"node-07: [rank9]: plain 0", 9) == 0  # counted, and its variant recorded
    assert sorted(table.ranks_seen()) == [3, 4, 9] and b"node-07" in table.keep_sets()[0]
    assert table.probe_keep(b"something else", 9) == -1


def test_variant_key_and_relaxed_digits():
    fields = (12, 12, 1, 5, 0)
    assert variant_key(b"node-01: [rank3]: plain 7", fields) == variant_key(b"node-01: [rank3]: plain 9", fields)
    assert variant_key(b"node-01: [rank3]: plain 7", fields) != variant_key(b"node-01: [rank31]: plain 7", fields)
    assert variant_key(b"node-01: [rank3]: plain 7", fields) != variant_key(b"node-11: [rank3]: plain 7", fields)
    assert relax_digits(r"Xid (?P<xid>48|64)\b[0-9a-f]{4}\x1b\d{1,3}") == r"Xid (?P<xid>\d*|\d*)\b[0-9a-f]{4}\x1b\d*"
    # digit counts are relaxed too: one shape holds `to: 0.25` and the collapse `to: 0.0001`
    loose = relax_digits(r"loss scale to:? (?:0\.000\d*|\d(?:\.\d+)?[eE]-(?:0?[4-9]|[1-9]\d))\b")
    assert loose == r"loss scale to:? (?:\d*\.\d*|\d*(?:\.\d*)?[eE]-(?:\d*|\d*))\b"


def test_a_digit_sensitive_error_of_a_kept_shape_is_never_counted_away():
    """`setting loss scale to: 0.25` survives as a plain line; later lines of the same shape
    carry the collapse (`… to: 0.0001220703125`), which only the rule's digits tell apart."""
    import io

    from app.core.pipeline import Pipeline

    scales = [0.25 / 2 ** k for k in range(12)]
    log = "".join(f"| WARNING: overflow detected, setting loss scale to: {s!r}\n" for s in scales)
    for workers in (1,):
        d = Pipeline().diagnose(io.BytesIO(log.encode()), workers=workers).diagnosis
        assert (d.root_cause.error_type.value, d.root_cause.rule_id) == ("NaNLoss", "loss-scale-collapse")


def test_binary_junk_is_skipped_early_and_said_so(rules_min, compress_source):
    import random

    from app.core.binary import BINARY_RULE_ID

    rnd = random.Random(5)
    junk = rnd.randbytes(3 << 20).replace(b"\n", b"\x00")
    head = b"".join(megatron(i).encode() + b"\n" for i in range(1, 101))
    ecc = b"[rank3]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
    noise = b"".join(rnd.randbytes(rnd.randrange(1, 400)) + b"\n" for _ in range(4000))
    data = head + junk[: 1 << 20] + b"\n" + noise + ecc + junk[1 << 20:] + b"\n"
    log = compress_source(io.BytesIO(data), rules_min, chunk_size=1 << 20)
    s = log.stats
    assert s.lines_in == data.count(b"\n")
    assert s.lines_kept + s.lines_dropped == s.lines_in
    assert s.dropped_by_rule[BINARY_RULE_ID] > 4000 and s.dropped_by_rule["t-iter"] == 100
    assert any("look like binary data" in w for w in s.warnings)
    ecc_line = data[: data.index(ecc)].count(b"\n") + 1
    assert [(o.line, o.rule.id) for o in log.occurrences] == [(ecc_line, "t-ecc")]  # text inside junk is read
    assert log.flagged_lines == []  # no "nan"/"inf"/"error" found by chance in random bytes


def test_text_in_any_script_is_not_binary():
    import random

    from app.core.binary import BINARY_SHARE, nontext_share

    text = ("\x1b[32m[2024-03-02 11:01:43]\x1b[0m 训练步骤 iteration 12 | лосс 2.1 | ε=1e-8 ✓\t\r\n" * 5000).encode()
    assert nontext_share(text, len(text)) < 0.01
    junk = random.Random(1).randbytes(1 << 20)
    assert nontext_share(junk, len(junk)) > BINARY_SHARE
    nul_padding = b"\x00" * (1 << 20)
    assert nontext_share(nul_padding, len(nul_padding)) == 1.0


def test_a_mostly_binary_line_among_text_is_not_an_error_hint(rules_min, compress_source):
    data = b"start\n" + bytes(range(1, 9)) * 40 + b" nan inf Error " + bytes(range(14, 31)) * 20 + b"\nend\n"
    log = compress_source(io.BytesIO(data), rules_min)
    assert log.stats.lines_in == 3
    assert log.flagged_lines == []


def test_progress_of_a_compressed_file_is_compressed_bytes_read(tmp_path, rules_min, compress_source):
    import gzip

    path = tmp_path / "job.log.gz"
    path.write_bytes(gzip.compress(make_log(20_000).encode(), compresslevel=1))
    ticks: list[int] = []
    compress_source(path, rules_min, chunk_size=256 * 1024, on_progress=ticks.append)
    assert sum(ticks) == path.stat().st_size  # of the total a bar knows: the file size
    assert len(ticks) > 3  # as it goes, not once at the end


def test_parallel_workers_report_progress_while_they_scan(tmp_path, rules_min, monkeypatch, compress_source):
    path = tmp_path / "big.log"
    path.write_text(make_log(40_000))
    monkeypatch.setattr(compress_mod, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(compress_mod, "PROGRESS_POLL_S", 0.001)
    ticks: list[int] = []
    compress_source(path, rules_min, workers=2, chunk_size=64 * 1024, on_progress=ticks.append)
    assert sum(ticks) == path.stat().st_size
    assert len(ticks) > 2  # the bar moves while the workers run, not only at the end


def test_metric_series_stays_bounded_and_keeps_a_spike():
    from app.core.compressed import KEEP_RECENT_POINTS, MAX_METRIC_POINTS, MetricPoint, thin_metrics
    from app.core.events import find_loss_spike

    points = [MetricPoint(line=i, step=i, values={"loss": 2.0 - i * 1e-5}) for i in range(20_000)]
    points[12_345].values["loss"] = 9.0  # a spike the loss never comes back from ...
    for p in points[12_346:]:
        p.values["loss"] = 8.5
    series = []
    for p in points:  # as the compressor adds them
        series.append(p)
        if len(series) > MAX_METRIC_POINTS:
            series = thin_metrics(series)
    assert len(series) <= MAX_METRIC_POINTS
    assert [p.line for p in series] == sorted(p.line for p in series)
    assert series[-KEEP_RECENT_POINTS:] == points[-KEEP_RECENT_POINTS:]
    spike = find_loss_spike(series)
    assert spike is not None and spike[1].line == 12_345  # ... found on the thinned series


def _mixed_log(seed: int) -> bytes:
    """A log that exercises every path of the scan loop at once: per-rank metric lines behind
    pdsh IP prefixes and rank tags, tqdm bars redrawn with \\r (some behind a prefix-only first
    segment), plain warnings from many ranks/hosts (kept slots and their variants), indented
    traceback lines, a torchrun summary behind a prefix, CRLF lines, an overlong line, and the
    error burst."""
    import random

    rnd = random.Random(seed)
    out: list[str] = []
    hosts = [f"10.0.{n // 256}.{n % 256}" for n in range(250, 258)] + [f"node-{n:03d}" for n in range(4)]
    for step in range(1, 400):
        for r in rnd.sample(range(48), 6):
            host = hosts[r % len(hosts)]
            out.append(f"{host}: [rank{r}]: step: {step}  loss: {rnd.uniform(1, 3):.4f}  memory: 61.80GiB(65.05%)  "
                       f"tps: {rnd.randrange(3000, 4000):,}  tflops: {rnd.uniform(380, 420):.2f}  mfu: 40.45%")
        if step % 7 == 0:
            bar = "".join(f"\r {p:3d}%|{'#' * (p // 10):<10}| {p}/100 [00:{p:02d}<00:10, 5.1it/s]" for p in range(0, 101, 25))
            prefix = rnd.choice(["", "10.0.0.11: [rank0]:", "[rank3]:"])
            out.append(prefix + bar)
        if rnd.random() < 0.3:
            r = rnd.randrange(48)
            out.append(f"{hosts[r % len(hosts)]}: [rank{r}]: /opt/lib/module_{rnd.randrange(40)}.py:{rnd.randrange(900)}: "
                       f"UserWarning: option {rnd.choice(['alpha', 'beta', 'gamma'])} is deprecated")
        if rnd.random() < 0.05:
            out.append(f"[rank{rnd.randrange(48)}]:   File \"/opt/lib/x.py\", line {rnd.randrange(900)}, in f")
        if rnd.random() < 0.03:
            out.append(f"plain windows line {step}\r")  # CRLF
    out.append("x" * 70_000)
    out += ["10.0.0.15:   host      : node-004", "10.0.0.15:   rank      : 37 (local_rank: 5)"]
    out += ["10.0.0.15: [rank37]: Traceback (most recent call last):",
            "10.0.0.15: [rank37]: RuntimeError: CUDA error: an illegal memory access was encountered"]
    return ("\n".join(out) + "\n").encode()


@pytest.mark.skipif(ShapeTable is None, reason="C scan loop not built")
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("chunk_size", [4096, 65536])
def test_c_and_python_loops_agree_on_a_log_of_every_line_class(ruleset, seed, chunk_size):
    data = _mixed_log(seed)
    fast, pure = (_compress_source(io.BytesIO(data), ruleset, chunk_size=chunk_size, use_c=c) for c in (True, False))
    assert fast.stats.to_json_dict() == pure.stats.to_json_dict()
    assert fast.text == pure.text
    key = lambda t: (t.first_line, t.text)  # noqa: E731
    assert [(t.count, t.last_line, sorted(t.ranks), sorted(t.hosts)) for t in sorted(fast.templates, key=key)] == \
        [(t.count, t.last_line, sorted(t.ranks), sorted(t.hosts)) for t in sorted(pure.templates, key=key)]
    assert sorted(fast.known_ranks) == sorted(pure.known_ranks)
    assert sorted(fast.known_hosts) == sorted(pure.known_hosts)
    assert [(o.line, o.rule.id) for o in fast.occurrences] == [(o.line, o.rule.id) for o in pure.occurrences]
    assert fast.last_progress == pure.last_progress
    assert fast.rank_hosts == pure.rank_hosts
    assert fast.stats.lines_in == fast.stats.lines_kept + fast.stats.lines_dropped
    assert fast.stats.dropped_by_rule.get("tqdm-bar")  # the \r bars, prefixed or not
    assert {"10.0.0.15", "node-000"} <= set(fast.known_hosts)
    assert fast.rank_hosts.get(37) == "node-004"  # torchrun's summary behind the pdsh prefix


@pytest.mark.skipif(ShapeTable is None, reason="C scan loop not built")
def test_c_shape_hash_tells_apart_shapes_that_differ_in_one_byte_anywhere():
    """The hash runs four 8-byte lanes and carries the last 0-31 bytes of a block: a shape that
    differs from a known one in any single byte, at any length, is not taken for it."""
    import random

    rnd = random.Random(11)
    table = ShapeTable(2)
    known = []
    for n in [*range(1, 80), 255, 256, 257, 271, 272, 287, 288, 289, 300]:
        shape = bytes(rnd.choice(b"abcdefgh :=") for _ in range(n))
        table.add(shape, 1)
        known.append(shape)
    for shape in known:
        assert table.has(shape)
        for i in range(len(shape)):
            other = shape[:i] + (b"Z" if shape[i:i + 1] != b"Z" else b"Y") + shape[i + 1:]
            assert not table.has(other), (shape, i)
        assert not table.has(shape + b"a") and not table.has(shape[:-1])


def test_a_range_worker_that_dies_or_fails_is_an_error_not_a_wait(tmp_path, rules_min, monkeypatch):
    """The first byte range is scanned in this process, the second by a forked child: a child
    killed mid-scan (out of memory, a signal) ends the compression with an error naming its exit
    code instead of waiting forever, and an exception in the child is raised here."""
    import os

    path = tmp_path / "big.log"
    path.write_text(make_log(20_000))
    monkeypatch.setattr(compress_mod, "PARALLEL_MIN_BYTES", 1)
    scan = compress_mod._compress_range

    def dies(args, tick=None):
        if args[1] > 0:  # the child's range
            os._exit(3)
        return scan(args, tick)

    monkeypatch.setattr(compress_mod, "_compress_range", dies)
    with pytest.raises(RuntimeError, match="exit code 3"):
        compress_mod.compress_source(path, rules_min, workers=2, chunk_size=64 * 1024)

    def fails(args, tick=None):
        if args[1] > 0:
            raise ValueError("bad range")
        return scan(args, tick)

    monkeypatch.setattr(compress_mod, "_compress_range", fails)
    with pytest.raises(ValueError, match="bad range"):
        compress_mod.compress_source(path, rules_min, workers=2, chunk_size=64 * 1024)

    # findings cut short (the pipe closed mid-pickle) do not load: an error, not a partial result
    monkeypatch.setattr(compress_mod, "_compress_range", scan)
    dumps = pickle.dumps
    monkeypatch.setattr(pickle, "dumps", lambda obj, protocol=None: dumps(obj, protocol)[:-20])
    with pytest.raises(RuntimeError, match="cut short"):
        compress_mod.compress_source(path, rules_min, workers=2, chunk_size=64 * 1024)


def test_range_workers_are_reaped_after_the_merge(tmp_path, rules_min, monkeypatch):
    """A child whose findings arrived is reaped once they are merged (its exit is not waited for
    first), but it is reaped: no zombie is left behind."""
    import os

    path = tmp_path / "big.log"
    path.write_text(make_log(20_000))
    monkeypatch.setattr(compress_mod, "PARALLEL_MIN_BYTES", 1)
    forked = []
    fork = os.fork

    def recording_fork():
        pid = fork()
        if pid:
            forked.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", recording_fork)
    log = compress_mod.compress_source(path, rules_min, workers=2, chunk_size=64 * 1024)
    assert log.stats.lines_in == make_log(20_000).count("\n") and len(forked) == 1
    with pytest.raises(ChildProcessError):  # (already reaped)
        os.waitpid(forked[0], os.WNOHANG)


@pytest.mark.parametrize("encoding", ["gzip", "zstd"])
def test_a_compressed_log_decoded_by_a_process_compresses_as_by_a_thread(tmp_path, rules_min, monkeypatch,
                                                                         encoding, compress_source):
    """With more than one worker allowed (the CLI), a .gz/.zst is decoded by a forked child into
    shared buffers; with one (a server's diagnosis worker), by a thread. Same result either way."""
    import gzip

    import zstandard

    from app.core.readahead import DecodedBuffers

    data = make_log(20_000).encode()
    path = tmp_path / "job.log.bin"
    path.write_bytes(gzip.compress(data, 1) if encoding == "gzip" else zstandard.ZstdCompressor().compress(data))
    kinds = []

    class Recording(DecodedBuffers):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            kinds.append(self.decoder_kind)

    monkeypatch.setattr(compress_mod, "DecodedBuffers", Recording)
    by_thread = compress_source(path, rules_min, workers=1, chunk_size=256 * 1024)
    by_process = compress_source(path, rules_min, workers=2, chunk_size=256 * 1024)
    assert kinds == ["thread", "process"]
    assert by_process.text == by_thread.text and by_process.stats.to_json_dict() == by_thread.stats.to_json_dict()
    assert by_process.stats.lines_in == data.count(b"\n") and by_process.occurrences


@pytest.mark.parametrize("tail", [b"", b"no newline at the end"])
def test_chunk_view_reads_a_shared_mapping_as_it_reads_bytes(tail):
    """A decoding process hands over anonymous shared mappings, which have no count(): the lines
    a view of one returns (the last one, and neighbours of known spans) equal those of bytes."""
    import mmap

    from app.core.chunkview import ChunkView

    data = b"".join(b"line %d\n" % i for i in range(1000)) + tail
    shared = mmap.mmap(-1, len(data) + 100)
    shared[:len(data)] = data
    lines = data.split(b"\n")
    if not tail:
        lines.pop()
    for chunk in (data, bytearray(data) + b"junk past the limit", shared):
        view = ChunkView(chunk, None, {500: (data.index(b"line 500\n"), data.index(b"line 500\n") + 8)}, len(data))
        assert len(view) == len(lines)
        assert [view[j] for j in (0, 498, 499, 501, 503, -1)] == [lines[j] for j in (0, 498, 499, 501, 503, -1)]
    shared.close()


@pytest.mark.parametrize(("line", "host"), [
    ("EI0002: [PID: 7277] 2024-11-28-11:59:30.645.648 The wait execution of the Notify register times out.", None),
    ("EE9999: Inner Error!", None),
    ("E19999: Inner Error, Please contact support engineer!", None),
    ("node-12: RuntimeError: CUDA error: an illegal memory access was encountered", "node-12"),
    ("10.1.0.7: [rank3]: Watchdog caught collective operation timeout", "10.1.0.7"),
])
def test_a_message_code_opening_a_line_is_not_a_host_prefix(line, host):
    m = host_match(line)
    assert (m.group(1) if m else None) == host


def test_an_nccl_line_behind_mpiruns_ctime_timestamp_keeps_its_host():
    line = ("Fri Aug 11 12:31:45 2023[1,0]<stdout>:tomte401:1850301:1881341 [0] transport.cc:154 NCCL WARN "
            "Cuda failure 'invalid argument'")
    assert host_match(line).group(1) == "tomte401"


@pytest.mark.parametrize("losses, spike_at", [
    ([3.062589, 3.114286, 7.712340], 2),  # Megatron's lm loss, 2.5x its median in one interval
    ([2.1, 2.0, 2.05, 4.3, 4.4, 4.2], 3),  # doubled and stayed there
    ([2.1, 2.0, 2.05, 3.9, 3.8], None),  # under twice the median
    ([0.30, 0.31, 0.9, 0.95], None),  # tripled but by under SPIKE_MIN_JUMP
    ([3.0, 3.1, 7.7, 3.2, 3.1], None),  # came back: noise
])
def test_a_loss_spike_is_a_doubling_that_does_not_recover(losses, spike_at):
    from app.core.compressed import MetricPoint
    from app.core.events import find_loss_spike
    points = [MetricPoint(line=i + 1, step=100 + i, values={"loss": v}) for i, v in enumerate(losses)]
    spike = find_loss_spike(points)
    assert (spike[0] if spike else None) == spike_at
