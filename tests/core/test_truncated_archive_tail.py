"""An archive cut a few bytes short is diagnosed on everything before the cut: the decoder
hands on each piece as it decodes it, so the error near the end of the log is still read."""

from __future__ import annotations

import gzip
import random

import pytest
import zstandard

from app.core.ingest import IngestReport, iter_chunks
from app.core.pipeline import Pipeline

ECC = b"[rank5]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n"


def _log(dump_lines: int) -> bytes:
    """About 3 MiB of training, the ECC error, then a stack dump of `dump_lines` lines."""
    rnd = random.Random(3)
    train = [f"[2024-03-02 11:{i // 60 % 60:02d}:{i % 60:02d}] iteration {i}/ 500000 | lm loss: "
             f"{rnd.random():.6f} | grad norm: {rnd.random() * 3:.3f} |\n".encode() for i in range(30000)]
    dump = [f"[rank5]: frame #{i}: 0x{rnd.getrandbits(48):012x} in /usr/lib/libtorch_cuda.so\n".encode()
            for i in range(dump_lines)]
    return b"".join(train) + ECC + b"".join(dump)


ENCODERS = {"gzip": gzip.compress, "zstd": lambda b: zstandard.ZstdCompressor().compress(b)}
# gzip: the error within the last 100 KB; zstd: within the last 200 KB, before the last block (a
# zstd block decodes whole or not at all, so the cut one is lost)
DUMP_LINES = {"gzip": 1200, "zstd": 3000}


@pytest.fixture(scope="module")
def pipeline() -> Pipeline:
    return Pipeline()


@pytest.mark.parametrize("encoding", sorted(ENCODERS))
def test_an_archive_cut_20_bytes_short_is_diagnosed_on_what_precedes_the_cut(tmp_path, pipeline, encoding):
    log = _log(DUMP_LINES[encoding])
    assert len(log) - log.index(ECC) < DUMP_LINES[encoding] * 80
    path = tmp_path / f"job.log.{encoding}"
    path.write_bytes(ENCODERS[encoding](log)[:-20])
    report = IngestReport()
    decoded = b"".join(iter_chunks(path, report))
    assert ECC in decoded
    assert len(decoded) > len(log) - (1024 if encoding == "gzip" else 128 * 1024)
    diagnosis = pipeline.diagnose(path).diagnosis
    assert diagnosis.root_cause.error_type.value == "ECCError"
    assert any(f"{encoding} stream is truncated" in w for w in diagnosis.compression.warnings)
