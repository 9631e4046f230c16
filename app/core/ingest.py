"""Ingest: stream a log as line-aligned byte chunks from a path, stdin or file object.

Compression is detected by magic bytes (gzip, zstd), not by file name. A truncated or corrupt
archive yields every byte that could be decoded plus a warning. Chunks always end on `\\n`
(the final one may not), so callers can split lines without carrying state. Memory is bounded
by the chunk size plus one capped line.
"""

from __future__ import annotations

import io
import os
import queue
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from app.core.zstdframes import FrameWalker

# what a decoder raises on bad data (zstd and gzip add their own: their modules are imported only
# for such input, so a plain log never loads them)
_DECODE_ERRORS: tuple[type[BaseException], ...] = (EOFError, OSError, zlib.error)


def _gzip_file(fileobj, read_size: int) -> tuple[_GzipStream, tuple[type[BaseException], ...]]:  # noqa: ANN001
    """A gzip reader and the errors it raises on bad data: ISA-L's inflate (about 3x zlib's
    speed, GIL released) when installed, else zlib's. Imported on the first gzip input, not at
    start-up."""
    try:
        from isal import isal_zlib
        from isal.igzip_lib import IsalError
    except ImportError:  # pragma: no cover - isal is a declared dependency
        return _GzipStream(fileobj, zlib, read_size), _DECODE_ERRORS
    return _GzipStream(fileobj, isal_zlib, read_size), (*_DECODE_ERRORS, IsalError)


class _GzipStream:
    """gzip decoding fed `read_size` compressed bytes at a time, each decoded byte handed on as
    soon as inflate produces it: a stream cut or damaged late still delivers everything before
    the damage (GzipFile drops all a failing read had decoded, up to a whole piece: an ECC
    error 20 bytes before the cut was lost with it). Members follow one another (concatenated
    gzip); zero padding after the last one is ignored, as gzip(1) does."""

    def __init__(self, raw, zlib_module, read_size: int) -> None:  # noqa: ANN001
        self._raw, self._zlib, self._read_size = raw, zlib_module, read_size
        self._inflate = zlib_module.decompressobj(wbits=31)
        self._input = b""

    def _next_member(self) -> bool:
        rest = self._inflate.unused_data.lstrip(b"\0")
        while not rest:
            more = self._raw.read(self._read_size)
            if not more:
                return False
            rest = more.lstrip(b"\0")
        self._inflate = self._zlib.decompressobj(wbits=31)
        self._input = rest
        return True

    def read(self, n: int) -> bytes:
        while n > 0:
            inflate = self._inflate
            if inflate.eof:
                if not self._next_member():
                    return b""
                continue
            data = inflate.unconsumed_tail or self._input or self._raw.read(self._read_size)
            self._input = b""
            if not data:
                raise EOFError("compressed file ended before the end-of-stream marker was reached")
            out = inflate.decompress(data, n)
            if out:
                return out
        return b""

    def readinto(self, buf) -> int:  # noqa: ANN001
        out = self.read(len(buf))
        buf[: len(out)] = out
        return len(out)


CHUNK_SIZE = 8 * 1024 * 1024
LINE_CAP = 64 * 1024
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
CUT_MARK = b" [logdx: line cut at %d bytes]"


RATIO_FLOOR = 256 * 1024 * 1024  # decompressed bytes always read before the ratio limit applies


@dataclass(frozen=True)
class Limits:
    """Bounds on the work one read of a log may cost; crossing one stops reading (a partial
    diagnosis with a warning), never an error. `deadline` is a `time.monotonic()` value."""

    deadline: float | None = None
    max_ratio: float | None = None  # decompressed / compressed bytes, past RATIO_FLOOR
    ratio_floor: int = RATIO_FLOOR

    @classmethod
    def within(cls, seconds: float | None, *, max_ratio: float | None = None) -> Limits:
        return cls(None if seconds is None else time.monotonic() + seconds, max_ratio)

    def expired(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def ratio_exceeded(self, out_bytes: int, in_bytes: int) -> bool:
        return (self.max_ratio is not None and out_bytes > self.ratio_floor
                and out_bytes > self.max_ratio * max(1, in_bytes))


def deadline_warning(bytes_read: int) -> str:
    return (f"diagnosis deadline reached (LOGDX_DIAGNOSIS_DEADLINE_S) after {bytes_read} bytes; "
            "the rest of the log was not read: this is a partial diagnosis")


class InputError(ValueError):
    """The input cannot be read at all (missing file, not a file); the message is user-facing."""


@dataclass
class IngestReport:
    encoding: str = "plain"  # plain | gzip | zstd
    bytes_read: int = 0  # decompressed bytes delivered
    lines_cut: int = 0
    warnings: list[str] = field(default_factory=list)
    # reading ended before the end of the log: a limit (deadline, ratio), or an archive that is
    # truncated or corrupt (what follows the damage is not there to read)
    cut_short: bool = False


def _open_binary(source: str | Path | BinaryIO) -> tuple[BinaryIO, bool]:
    if isinstance(source, (str, Path)):
        if str(source) == "-":
            return sys.stdin.buffer, False
        path = Path(source)
        if not path.exists():
            raise InputError(f"no such file: {path}")
        if not path.is_file():
            raise InputError(f"not a regular file: {path}")
        try:
            return open(path, "rb"), True
        except OSError as exc:
            raise InputError(f"cannot open {path}: {exc.strerror}") from None
    return source, False


class _Walked:
    """The compressed source, with every byte read also fed to a FrameWalker."""

    def __init__(self, raw, walker: FrameWalker) -> None:
        self._raw = raw
        self._walker = walker

    def read(self, n: int = -1) -> bytes:
        data = self._raw.read(n)
        self._walker.feed(data)
        return data


class _ZstdReader:
    """zstd decoding with zstandard's stream reader (C loop, GIL released, output bounded by each
    read's size whatever the input expands to), plus a FrameWalker over the compressed bytes that
    notices a stream cut inside a frame (the stream reader ends quietly there)."""

    RAW_READ = 1024 * 1024  # compressed bytes read from the source at a time (fewer GIL hand-offs)

    def __init__(self, raw) -> None:
        self._walker = FrameWalker()
        import zstandard

        self._reader = zstandard.ZstdDecompressor().stream_reader(
            _Walked(raw, self._walker), read_size=self.RAW_READ, read_across_frames=True)

    def _end(self) -> None:
        if not self._walker.complete:
            raise EOFError("zstd frame ended early")

    def read(self, n: int) -> bytes:
        out = self._reader.read(n)
        if not out:
            self._end()
        return out

    def readinto(self, buf) -> int:  # noqa: ANN001
        got = self._reader.readinto(buf)
        if not got:
            self._end()
        return got


class _Decoder:
    """Wrap a raw stream with the right decompressor; read() never raises on corrupt data."""

    # decompressed bytes per read. What a damaged tail loses: gzip, nothing before the cut (at
    # most what one GZIP_READ of corrupt input held); zstd, the block the cut falls in (the format
    # decodes whole blocks, at most 128 KiB)
    PIECE = 1024 * 1024
    GZIP_READ = 16 * 1024  # compressed bytes per read of the gzip decoder (see _Prefixed.max_read)

    def __init__(self, raw: BinaryIO, report: IngestReport) -> None:
        self._report = report
        self._errors = _DECODE_ERRORS  # what the decoder raises on bad data (the gzip one adds its own)
        self._piece = self.PIECE
        head = raw.read(4)
        self._done = False
        self._raw_in = _Prefixed(head, raw)  # counts the compressed bytes consumed
        if head.startswith(GZIP_MAGIC):
            report.encoding = "gzip"
            self._raw_in.max_read = self.GZIP_READ
            self._stream, self._errors = _gzip_file(self._raw_in, self.GZIP_READ)
        elif head.startswith(ZSTD_MAGIC):
            import zstandard

            report.encoding = "zstd"
            self._stream = _ZstdReader(self._raw_in)
            self._errors = (*_DECODE_ERRORS, zstandard.ZstdError)
        else:
            self._stream = self._raw_in
            self._piece = 1 << 30  # plain bytes cannot be corrupt: read whole chunks at once

    @property
    def consumed(self) -> int:
        return self._raw_in.consumed

    @property
    def encoding(self) -> str:
        return self._report.encoding

    @property
    def done(self) -> bool:
        """The stream ended (or failed: a warning says so); reads return nothing more."""
        return self._done

    def read(self, n: int) -> bytes:
        """Read up to n bytes in small pieces, so a corrupt tail loses at most one piece."""
        parts: list[bytes] = []
        want = n
        while want > 0 and not self._done:
            try:
                data = self._stream.read(min(want, self._piece))
            except self._errors as exc:
                self._fail(exc, self._report.bytes_read + sum(map(len, parts)))
                break
            if not data:
                self._done = True
                break
            parts.append(data)
            want -= len(data)
        return b"".join(parts)


    def readinto(self, view: memoryview) -> int:
        """Fill `view` (or up to the end of the stream) in pieces, like read(); returns bytes put."""
        got, want = 0, len(view)
        while got < want and not self._done:
            try:
                n = self._stream.readinto(view[got: got + min(want - got, self._piece)])
            except self._errors as exc:
                self._fail(exc, self._report.bytes_read + got)
                break
            if not n:
                self._done = True
                break
            got += n
        return got

    def _fail(self, exc: BaseException, got: int) -> None:
        self._done = True
        what = "truncated" if isinstance(exc, EOFError) else "corrupt"
        self._report.cut_short = True  # (the log goes on past what decodes: no stall can be read from its end)
        self._report.warnings.append(
            f"{self._report.encoding} stream is {what} after {got} decompressed bytes ({exc}); "
            "diagnosed what could be read")


class _Prefixed(io.RawIOBase):
    """A stream that first returns `head` (bytes already consumed for magic sniffing)."""

    def __init__(self, head: bytes, raw: BinaryIO) -> None:
        self._head = head
        self._raw = raw
        self.consumed = 0
        # at most this much per read: the decompression-ratio limit compares output with input
        # consumed, which a decoder reading far ahead would inflate
        self.max_read = 1 << 30

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        if self._head:
            n = min(len(buf), len(self._head))
            buf[:n] = self._head[:n]
            self._head = self._head[n:]
            self.consumed += n
            return n
        data = self._raw.read(min(len(buf), self.max_read))
        if not data:
            return 0
        buf[: len(data)] = data
        self.consumed += len(data)
        return len(data)

    def read(self, n: int = -1) -> bytes:
        if n is not None and n > self.max_read:
            n = self.max_read
        if n is None or n < 0:
            out = self._head + self._raw.read()
        elif self._head:
            out, self._head = self._head[:n], self._head[n:]
            if len(out) < n:
                out += self._raw.read(n - len(out))
        else:
            out = self._raw.read(n)
        self._head = b"" if n is None or n < 0 else self._head
        self.consumed += len(out)
        return out


class _ReadAhead:
    """Decompression in a thread, one chunk ahead of the scan: zstd and zlib release the GIL
    while they decode, so on two cores a compressed log costs little more than a plain one.
    At most DEPTH decoded chunks wait in the queue (memory stays bounded)."""

    DEPTH = 2

    def __init__(self, decoder: _Decoder, size: int) -> None:
        self._queue: queue.Queue = queue.Queue(self.DEPTH)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(decoder, size), name="logdx-decompress", daemon=True)
        self._thread.start()

    def _run(self, decoder: _Decoder, size: int) -> None:
        try:
            while not self._stop.is_set():
                data = decoder.read(size)
                self._put(data)
                if not data:
                    return
        except BaseException as exc:  # handed to the reading thread, which raises it
            self._put(exc)

    def _put(self, item) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def read(self) -> bytes:
        item = self._queue.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        self._stop.set()
        while self._thread.is_alive():
            try:
                self._queue.get(timeout=0.1)
            except queue.Empty:
                pass
        self._thread.join()


def iter_chunks(source: str | Path | BinaryIO, report: IngestReport,
                chunk_size: int = CHUNK_SIZE, line_cap: int = LINE_CAP,
                limits: Limits | None = None) -> Iterator[bytes]:
    """Yield byte chunks that end on a newline (the last one may not); cap overlong lines.

    A line longer than `line_cap` that spans chunk boundaries is cut to `line_cap` bytes and
    marked; the rest of it is skipped without buffering it. Lines that fit inside one chunk but
    exceed the cap are cut by the compressor, which sees the whole line anyway.
    """
    raw, owned = _open_binary(source)
    ahead = None
    try:
        decoder = _Decoder(raw, report)
        if report.encoding != "plain":
            ahead = _ReadAhead(decoder, chunk_size)
        carry = b""
        skipping = 0  # > 0 while discarding the tail of a cut line
        ratio_stop = False  # set on crossing the ratio limit: this chunk is the last one
        while not ratio_stop:
            if limits is not None and limits.expired():
                report.warnings.append(deadline_warning(report.bytes_read))
                report.cut_short = True
                break
            data = ahead.read() if ahead is not None else decoder.read(chunk_size)
            if not data:
                break
            report.bytes_read += len(data)
            if limits is not None and report.encoding != "plain" \
                    and limits.ratio_exceeded(report.bytes_read, decoder.consumed):
                report.warnings.append(
                    f"{report.encoding} stream expands more than {limits.max_ratio:g}x "
                    f"(LOGDX_MAX_DECOMPRESSION_RATIO): stopped after {report.bytes_read} decompressed "
                    f"bytes from {decoder.consumed} compressed; this is a partial diagnosis")
                ratio_stop = report.cut_short = True
            if skipping:
                nl = data.find(b"\n")
                if nl < 0:
                    skipping += len(data)
                    continue
                carry += CUT_MARK % line_cap
                report.lines_cut += 1
                data = data[nl:]
                skipping = 0
            nl = data.rfind(b"\n")
            if nl < 0:
                carry += data
                if len(carry) > line_cap:
                    carry = carry[:line_cap]
                    skipping = 1
                continue
            chunk = b"".join((carry, memoryview(data)[: nl + 1])) if carry else data[: nl + 1]
            carry = data[nl + 1:]
            if len(carry) > line_cap:
                carry = carry[:line_cap]
                skipping = 1
            yield chunk
        if skipping:
            carry += CUT_MARK % line_cap
            report.lines_cut += 1
        if carry:
            yield carry
    finally:
        if ahead is not None:
            ahead.close()
        if owned:
            raw.close()


def iter_file_buffers(path: Path, report: IngestReport, start: int = 0, end: int | None = None,
                      chunk_size: int = CHUNK_SIZE, line_cap: int = LINE_CAP,
                      limits: Limits | None = None) -> Iterator[tuple[bytearray, int]]:
    """Line-aligned chunks of a plain regular file (or a byte range of it) read into one reused
    buffer: yields `(buffer, length)`, valid until the next iteration. One copy per byte (the
    read itself), no page faults, no allocation per chunk. A line that does not fit in the
    buffer is cut to `line_cap` bytes and marked, as in `iter_chunks`."""
    with open(path, "rb", buffering=0) as fh:
        size = os.fstat(fh.fileno()).st_size
        left = (size if end is None else min(end, size)) - start
        # a small file gets a small buffer (8 MiB of zeros cost a one-line log a few ms); a
        # buffer larger than what is left never fills, so lines are cut exactly as before
        buf = bytearray(min(chunk_size, max(0, left) + 1))
        fh.seek(start)
        have = 0  # bytes of a partial line carried at the front of buf
        skipping = False  # discarding the rest of a cut line
        with memoryview(buf) as view:
            while left > 0 or have:
                if limits is not None and limits.expired():
                    report.warnings.append(deadline_warning(report.bytes_read))
                    report.cut_short = True
                    break
                n = fh.readinto(view[have: have + min(chunk_size - have, left)]) if left > 0 else 0
                left -= n
                report.bytes_read += n
                total = have + n
                if skipping:
                    nl = buf.find(b"\n", 0, total)
                    if nl < 0:
                        have = 0
                        if n == 0:
                            break
                        continue
                    skipping = False
                    view[: total - nl - 1] = view[nl + 1: total]
                    have = total - nl - 1
                    continue
                if n == 0:  # end of input: the last line has no newline
                    yield buf, total
                    break
                nl = buf.rfind(b"\n", 0, total)
                if nl < 0:
                    if total < chunk_size:
                        have = total
                        continue
                    report.lines_cut += 1
                    cut = bytes(view[:line_cap]) + CUT_MARK % line_cap + b"\n"
                    yield bytearray(cut), len(cut)
                    have, skipping = 0, True
                    continue
                yield buf, nl + 1
                have = total - nl - 1
                view[:have] = view[nl + 1: total]

