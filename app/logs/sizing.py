"""How many bytes a stored log expands to, without decompressing it: plain logs are their size;
gzip says it in its trailer (ISIZE, modulo 4 GiB), zstd in its frame header when the writer
recorded it. A declared size is only trusted when it is at least the compressed size; otherwise
the size is bounded by the decompression-ratio limit, which reading enforces."""

from __future__ import annotations

import struct
from pathlib import Path

import zstandard

from app.core.ingest import GZIP_MAGIC, RATIO_FLOOR, ZSTD_MAGIC


def uncompressed_bound(path: Path, size: int, *, max_ratio: float) -> int:
    """Bytes the first `size` bytes of `path` decode to at most (known or bounded)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(18)
            declared = None
            if head.startswith(GZIP_MAGIC) and size >= 18:
                fh.seek(size - 4)
                declared = struct.unpack("<I", fh.read(4))[0]
            elif head.startswith(ZSTD_MAGIC):
                try:
                    value = zstandard.frame_content_size(head)
                    declared = value if value >= 0 else None
                except zstandard.ZstdError:
                    declared = None
            else:
                return size
    except OSError:
        return size
    if declared is not None and declared >= size:
        return declared
    return max(RATIO_FLOOR, int(size * max_ratio))
