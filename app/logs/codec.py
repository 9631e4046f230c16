"""Streaming checks on raw log bytes: sha256, size, encoding by magic bytes, and a decode pass
for gzip/zstd that keeps memory flat (decompressed output is discarded in bounded pieces)."""

from __future__ import annotations

import hashlib
import zlib

import zstandard

from app.core.ingest import RATIO_FLOOR
from app.logs.models import Encoding

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_OUT_STEP = 1 << 20


def sniff_encoding(head: bytes) -> Encoding:
    if head.startswith(GZIP_MAGIC):
        return Encoding.GZIP
    if head.startswith(ZSTD_MAGIC):
        return Encoding.ZSTD
    return Encoding.PLAIN


class _RatioExceeded(Exception):
    """The archive expands past the ratio limit: stop decoding it here."""


class _NullSink:
    def __init__(self) -> None:
        self.written = 0  # decompressed bytes seen
        self.limit: int | None = None

    def write(self, data: bytes) -> int:
        self.written += len(data)
        if self.limit is not None and self.written > self.limit:
            raise _RatioExceeded
        return len(data)


class _GzipCheck:
    """Validates a (possibly multi-member) gzip stream; keeps no output."""

    def __init__(self) -> None:
        self._d = zlib.decompressobj(wbits=31)
        self.trailing_garbage = False
        self.out = 0  # decompressed bytes seen
        self.limit: int | None = None

    def feed(self, data: bytes) -> None:
        while data and not self.trailing_garbage:
            if self._d.eof:
                # the next gzip member, or padding/junk after the last one
                if not GZIP_MAGIC.startswith(data[:2]):
                    self.trailing_garbage = True
                    return
                self._d = zlib.decompressobj(wbits=31)
            self.out += len(self._d.decompress(data, _OUT_STEP))
            while self._d.unconsumed_tail and not self._d.eof:
                if self.limit is not None and self.out > self.limit:
                    raise _RatioExceeded
                self.out += len(self._d.decompress(self._d.unconsumed_tail, _OUT_STEP))
            data = self._d.unused_data if self._d.eof else b""

    @property
    def truncated(self) -> bool:
        return not self._d.eof


class StreamCheck:
    """Feed raw bytes in order; afterwards `sha256`, `size`, `encoding`, `error`, `warnings`."""

    def __init__(self, *, validate: bool = True, max_ratio: float | None = None) -> None:
        self._sha = hashlib.sha256()
        self.size = 0
        self.encoding: Encoding | None = None
        self.error: str | None = None
        self.warnings: list[str] = []
        self._validate = validate
        self._max_ratio = max_ratio  # past RATIO_FLOOR, a bomb is not decoded to the end here
        self._head = b""
        self._gz: _GzipCheck | None = None
        self._zst = None

    def feed(self, data: bytes) -> None:
        self._sha.update(data)
        self.size += len(data)
        if self.encoding is None:
            self._head += data
            if len(self._head) < 4:
                return
            data, self._head = self._head, b""
            self._start(sniff_encoding(data))
        self._check(data)

    def _start(self, encoding: Encoding) -> None:
        self.encoding = encoding
        if not self._validate:
            return
        if encoding is Encoding.GZIP:
            self._gz = _GzipCheck()
        elif encoding is Encoding.ZSTD:
            self._zst_sink = _NullSink()
            self._zst = zstandard.ZstdDecompressor().stream_writer(self._zst_sink, write_return_read=True)

    def _check(self, data: bytes) -> None:
        if self.error is not None or not data or self._ratio_stopped:
            return
        if self._max_ratio is not None:
            limit = max(RATIO_FLOOR, int(self._max_ratio * self.size))
            if self._gz is not None:
                self._gz.limit = limit
            elif self._zst is not None:
                self._zst_sink.limit = limit
        try:
            if self._gz is not None:
                self._gz.feed(data)
            elif self._zst is not None:
                self._zst.write(data)
        except _RatioExceeded:
            self._ratio_stopped = True
            self.warnings.append(f"the archive expands more than {self._max_ratio:g}x; it was checked for "
                                 "corruption only up to that point")
        except zlib.error as exc:
            self.error = f"gzip stream is corrupt at or before byte {self.size}: {exc}"
        except zstandard.ZstdError as exc:
            self.error = f"zstd stream is corrupt at or before byte {self.size}: {exc}"

    _ratio_stopped = False

    def finish(self) -> None:
        if self.encoding is None:
            data, self._head = self._head, b""
            self._start(sniff_encoding(data) if len(data) >= 2 else Encoding.PLAIN)
            self._check(data)
        if self._ratio_stopped:
            return
        if self.error is None and self._gz is not None:
            if self._gz.trailing_garbage:
                self.warnings.append("bytes after the end of the gzip stream were ignored")
            elif self._gz.truncated:
                self.warnings.append("gzip stream ends early (truncated archive); what was read is kept")
        if self.error is None and self._zst is not None:
            try:
                self._zst.flush()
            except zstandard.ZstdError as exc:
                self.error = f"zstd stream is corrupt: {exc}"

    @property
    def sha256(self) -> str:
        return self._sha.hexdigest()
