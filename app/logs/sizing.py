"""Whether a stored log is bigger than a limit once decompressed, without trusting what an
archive declares (gzip's ISIZE is modulo 4 GiB and any header can lie): plain logs are their
size; gzip/zstd logs are decoded, output discarded, until the limit is crossed or they end.
That costs at most `limit` bytes of decoding and the decoder's bounded memory."""

from __future__ import annotations

from pathlib import Path

from app.core.ingest import GZIP_MAGIC, ZSTD_MAGIC, IngestReport, iter_chunks
from app.logs.storage import BoundedReader

_PIECE = 1 << 20


def decoded_size_over(path: Path, size: int, limit: int) -> bool:
    """True when the first `size` bytes of `path` decode to more than `limit` bytes."""
    try:
        fh = open(path, "rb")  # noqa: SIM115
    except OSError:
        return size > limit
    with fh:
        head = fh.read(4)
        if not (head.startswith(GZIP_MAGIC) or head.startswith(ZSTD_MAGIC)):
            return size > limit
        fh.seek(0)
        report = IngestReport()
        for _ in iter_chunks(BoundedReader(fh, size), report, chunk_size=_PIECE):
            if report.bytes_read > limit:
                return True
        return report.bytes_read > limit
