"""Lines of a scanned chunk, read on demand (the C scan loop hands back spans, not lines)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import mmap

try:
    from app.core._shapescan import count_newlines
except ImportError:  # (the C extension is not built: chunks are then always bytes)
    count_newlines = None


class ChunkView:
    """`lines[j]` of a chunk without splitting it: spans are known for surviving lines and are
    walked from there to the neighbouring lines that context needs. The chunk may be a reused
    buffer whose first `limit` bytes are valid; lines are returned as copies (bytes)."""

    def __init__(self, chunk: bytes | bytearray | mmap.mmap, n: int | None, spans: dict[int, tuple[int, int]],
                 limit: int | None = None) -> None:
        self._chunk = chunk
        self._count = n
        self._spans = spans
        self._limit = len(chunk) if limit is None else limit

    @property
    def _n(self) -> int:
        """Lines in the chunk (counted on first use: the scan may not have reached the end)."""
        if self._count is None:
            c, limit = self._chunk, self._limit
            # (a shared mapping filled by a decoding process has no count())
            newlines = c.count(b"\n", 0, limit) if count_newlines is None else count_newlines(c, limit)
            self._count = newlines + (1 if limit and c[limit - 1] != 10 else 0)
        return self._count

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, j: int) -> bytes:
        if j < 0:
            j += self._n
        a, b = self._span(j)
        return bytes(self._chunk[a:b])

    def _span(self, j: int) -> tuple[int, int]:
        span = self._spans.get(j)
        if span is not None:
            return span
        c, spans, limit = self._chunk, self._spans, self._limit
        if j == 0:
            end = c.find(b"\n", 0, limit)
            span = (0, limit if end < 0 else end)
        elif j == self._n - 1:
            end = limit - 1 if limit and c[limit - 1] == 10 else limit
            span = (c.rfind(b"\n", 0, end) + 1, end)
        else:
            # walk from the nearest known line (context asks for neighbours of survivors)
            after = next((k for k in range(j + 1, min(j + 5, self._n)) if k in spans or k == self._n - 1), None)
            if after is not None:
                start = self._span(after)[0]
                for _ in range(after - j):
                    end = start - 1
                    start = c.rfind(b"\n", 0, end) + 1
                span = (start, end)
            else:
                before = next((k for k in range(j - 1, max(j - 5, -1), -1) if k in spans or k == 0), 0)
                end = self._span(before)[1]
                for _ in range(j - before):
                    start = end + 1
                    end = c.find(b"\n", start, limit)
                    end = limit if end < 0 else end
                span = (start, end)
        spans[j] = span
        return span
