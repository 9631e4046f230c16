"""Hostile inputs to the core reader: decompression bombs keep memory at chunk size + one line."""

from __future__ import annotations

import io
import tracemalloc
import zlib

import pytest
import zstandard

from app.core.ingest import IngestReport, iter_chunks

BOMB_BYTES = 128 * 1024 * 1024
CHUNK = 1024 * 1024


def _zstd_bomb(piece: bytes) -> bytes:
    cobj = zstandard.ZstdCompressor(level=3).compressobj()
    out = [cobj.compress(piece) for _ in range(BOMB_BYTES // len(piece))]
    return b"".join(out) + cobj.flush()


def _gzip_bomb(piece: bytes) -> bytes:
    cobj = zlib.compressobj(1, zlib.DEFLATED, 31)
    out = [cobj.compress(piece) for _ in range(BOMB_BYTES // len(piece))]
    return b"".join(out) + cobj.flush()


ZEROS = bytes(1 << 20)
LINES = b"worker heartbeat ok\n" * (1 << 16)


@pytest.mark.parametrize("make", [_zstd_bomb, _gzip_bomb], ids=["zstd", "gzip"])
@pytest.mark.parametrize("piece", [ZEROS, LINES], ids=["zeros", "lines"])
def test_decompression_bomb_keeps_memory_bounded(make, piece):
    bomb = make(piece)
    assert len(bomb) * 100 < BOMB_BYTES  # it really is a bomb
    report = IngestReport()
    tracemalloc.start()
    try:
        total = 0
        for chunk in iter_chunks(io.BytesIO(bomb), report, chunk_size=CHUNK):
            total += len(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.bytes_read == BOMB_BYTES // len(piece) * len(piece)
    # the design bound: one chunk + one capped line, plus the decoder's bounded pieces
    assert peak < 16 * CHUNK, f"peak {peak / 2**20:.0f} MiB while decoding a bomb"


def test_deadline_ends_reading_with_a_partial_diagnosis(tmp_path):
    from app.core.ingest import Limits
    from app.core.pipeline import Pipeline

    path = tmp_path / "job.log"
    path.write_bytes(b"step 1 loss 2.0\n" * 1000 + b"RuntimeError: CUDA error: out of memory\n")
    expired = Limits(deadline=0.0)  # long past
    for source in (path, io.BytesIO(path.read_bytes())):
        result = Pipeline().diagnose(source, workers=1, limits=expired)
        assert any("deadline" in n for n in result.diagnosis.notes), result.diagnosis.notes
        assert result.diagnosis.root_cause.error_type != "CUDAOutOfMemory"  # the tail was not read
    full = Pipeline().diagnose(path, workers=1, limits=Limits.within(60))
    assert not any("deadline" in n for n in full.diagnosis.notes)


@pytest.mark.parametrize("make", [_zstd_bomb, _gzip_bomb], ids=["zstd", "gzip"])
def test_decompression_ratio_limit_stops_a_bomb_early(make):
    from app.core.ingest import Limits

    bomb = make(LINES)
    report = IngestReport()
    limits = Limits(max_ratio=50, ratio_floor=8 * CHUNK)
    total = sum(len(c) for c in iter_chunks(io.BytesIO(bomb), report, chunk_size=CHUNK, limits=limits))
    assert 8 * CHUNK < total <= 10 * CHUNK
    assert any("expands more than 50x" in w for w in report.warnings)
    # a normal log under the same limit is read whole
    plain = zlib.compress(b"".join(b"step %d loss %d\n" % (i, i * 7919 % 1000) for i in range(200_000)))
    report = IngestReport()
    gz = zlib.compressobj(6, zlib.DEFLATED, 31)
    data = gz.compress(zlib.decompress(plain)) + gz.flush()
    assert sum(len(c) for c in iter_chunks(io.BytesIO(data), report, chunk_size=CHUNK, limits=limits)) > 0
    assert report.warnings == []


# a save that begins after the last step and is still running half an hour later
STALLED_SAVE = (b"[2024-05-01 10:00:00] saving checkpoint at iteration 1000\n"
                b"[2024-05-01 10:30:00] checkpoint writer still busy, waiting\n")


def test_a_log_cut_short_is_not_called_a_hang(tmp_path):
    from app.core.ingest import Limits
    from app.core.pipeline import Pipeline

    path = tmp_path / "job.log"
    path.write_bytes(b"".join(b" iteration %8d/  500000 | consumed samples: %12d | elapsed time per iteration (ms): "
                              b"1234.5 | learning rate: 1.500E-04 | lm loss: 2.345678E+00 |\n" % (i, 512 * i)
                              for i in range(1, 1001)) + STALLED_SAVE)
    whole = Pipeline().diagnose(path, workers=1).diagnosis.root_cause
    assert whole.error_type == "Hang"  # read to the end: a save began after the last step and never ended

    class AfterFirstChunk(Limits):  # the deadline passes while the first chunk is being read
        calls = 0

        def expired(self) -> bool:
            type(self).calls += 1
            return type(self).calls > 1

    from app.core.compress import compress_source

    pipeline = Pipeline()
    log = compress_source(path, pipeline.ruleset, chunk_size=4096, workers=1, limits=AfterFirstChunk())
    assert 0 < log.stats.lines_in < 1000
    cut = pipeline.diagnose_compressed(log).diagnosis
    assert cut.root_cause.error_type == "Unknown"
    assert "before the end" in cut.root_cause.explanation
    assert any("deadline" in n for n in cut.notes)


@pytest.mark.parametrize("workers", [1, 2], ids=["decoding-thread", "decoding-process"])
@pytest.mark.parametrize("encoding", ["gzip", "zstd"])
def test_a_truncated_archive_is_not_called_a_hang(tmp_path, encoding, workers):
    """The log goes on past the damage: its last progress line is where the archive ends, not
    where training stopped (the same as a deadline that cut reading short)."""
    import gzip

    from app.core.pipeline import Pipeline

    data = b"".join(b" iteration %8d/  500000 | consumed samples: %12d | elapsed time per iteration (ms): "
                    b"1234.5 | learning rate: 1.500E-04 | lm loss: %.6E |\n" % (i, 512 * i, 2 + 1 / i)
                    for i in range(1, 20_001)) + STALLED_SAVE
    blob = gzip.compress(data) if encoding == "gzip" else zstandard.ZstdCompressor().compress(data)
    whole, cut = tmp_path / "whole.log.bin", tmp_path / "cut.log.bin"
    whole.write_bytes(blob)
    cut.write_bytes(blob[: len(blob) // 2])
    assert Pipeline().diagnose(whole, workers=workers).diagnosis.root_cause.error_type == "Hang"
    diagnosis = Pipeline().diagnose(cut, workers=workers).diagnosis
    assert diagnosis.root_cause.error_type == "Unknown", diagnosis.root_cause
    assert "truncated or corrupt archive" in diagnosis.root_cause.explanation
    assert any(f"{encoding} stream is truncated" in n for n in diagnosis.notes)


@pytest.mark.parametrize("make", [_zstd_bomb, _gzip_bomb], ids=["zstd", "gzip"])
@pytest.mark.parametrize("piece", [ZEROS, LINES], ids=["zeros", "lines"])
def test_decoded_buffers_of_a_bomb_keep_memory_bounded(make, piece):
    """The compressor's reader (a decoding thread filling reused buffers) under the same bombs."""
    from app.core.readahead import iter_decoded_buffers

    bomb = make(piece)
    report = IngestReport()
    tracemalloc.start()
    try:
        total = sum(n for _, n in iter_decoded_buffers(io.BytesIO(bomb), report, chunk_size=CHUNK))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.bytes_read == BOMB_BYTES // len(piece) * len(piece)
    assert 0 < total <= report.bytes_read  # (zeros are one line: cut at the line cap)
    assert peak < 16 * CHUNK, f"peak {peak / 2**20:.0f} MiB while decoding a bomb"


@pytest.mark.parametrize("make", [_zstd_bomb, _gzip_bomb], ids=["zstd", "gzip"])
@pytest.mark.parametrize("piece", [ZEROS, LINES], ids=["zeros", "lines"])
@pytest.mark.parametrize("process", [False, True], ids=["thread", "process"])
def test_decoded_buffers_stop_a_bomb_at_the_ratio_limit(make, piece, process):
    """Also a bomb of one endless line (zeros): nothing is delivered while its rest is skipped,
    so the decoder (a thread, or a forked process) checks the limits itself."""
    from app.core.ingest import Limits
    from app.core.readahead import iter_decoded_buffers

    report = IngestReport()
    limits = Limits(max_ratio=50, ratio_floor=8 * CHUNK)
    total = sum(n for _, n in iter_decoded_buffers(io.BytesIO(make(piece)), report, chunk_size=CHUNK,
                                                   limits=limits, decode_process=process))
    assert 8 * CHUNK < report.bytes_read <= 12 * CHUNK  # the floor, then at most what was decoded ahead
    assert 0 < total <= report.bytes_read
    assert report.cut_short and any("expands more than 50x" in w for w in report.warnings)
