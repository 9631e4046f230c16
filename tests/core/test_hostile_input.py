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
