"""Decoded streams (gzip, zstd, stdin) read into reused buffers by a thread, ahead of the scan.

zstd and zlib release the GIL while they decode, so on two cores the decoding thread runs next
to the scan. A few buffers go round between the two threads: the decoding thread fills a free
buffer straight from the decompressor (`readinto`: no joins, no slices), ends it on a line
boundary and hands it over; the scan hands it back when it asks for the next one. Lines are cut
and counted exactly as `iter_file_buffers` does for plain files.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from app.core.ingest import (
    CHUNK_SIZE, CUT_MARK, LINE_CAP, IngestReport, Limits, _Decoder, _open_binary, deadline_warning,
)

BUFFERS = 3  # one being scanned, one ready, one being filled
FIRST_FILL = 1024 * 1024  # bytes in the first buffer handed over
_END = object()
_LIMIT = object()  # the decoding thread saw a limit crossed (deadline, decompression ratio)


class _Filler:
    """The decoding thread: fills free buffers with whole lines."""

    def __init__(self, decoder: _Decoder, chunk_size: int, line_cap: int, limits: Limits | None = None) -> None:
        self.decoder = decoder
        self.limits = limits
        self.chunk_size = chunk_size
        self.line_cap = line_cap
        self.free: queue.Queue = queue.Queue()
        self.full: queue.Queue = queue.Queue()
        self.stop = threading.Event()
        self.decoded = 0  # bytes the decoder produced so far
        self.lines_cut = 0
        self.pool: list[bytearray] = []  # allocated by the decoding thread, as needed
        self.thread = threading.Thread(target=self._run, name="logdx-decode", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self._fill()
        except BaseException as exc:  # handed to the scanning thread, which raises it
            self.full.put(exc)

    def _fill(self) -> None:
        decoder, size, cap = self.decoder, self.chunk_size, self.line_cap
        carry = b""  # the partial last line of the previous buffer
        skipping = False  # discarding the rest of a cut line
        eof = False
        first = True
        while not eof:
            buf = self._free_buffer()
            if buf is None or self.stop.is_set():
                return
            view = memoryview(buf)
            have = len(carry)
            view[:have] = carry
            carry = b""
            # the first buffer is handed over after FIRST_FILL bytes: the scan starts learning the
            # log's shapes while the next buffers decode (the rest of it, if that held no line)
            limit = min(size, FIRST_FILL) if first else size
            first = False
            n = decoder.readinto(view[have:limit])
            if limit < size and not decoder.done and buf.rfind(b"\n", 0, have + n) < 0:
                n += decoder.readinto(view[have + n:size])
            self.decoded += n
            if self._limit_crossed():  # checked here too: skipping a cut line delivers nothing
                self.free.put(buf)
                self.full.put(_LIMIT)
                return
            total = have + n
            eof = decoder.done
            if skipping:
                nl = buf.find(b"\n", 0, total)
                if nl < 0:
                    self.free.put(buf)
                    continue
                skipping = False
                carry = bytes(view[nl + 1: total])  # the cut line's rest is dropped
                self.free.put(buf)
                eof = eof and not carry
                if eof:
                    break
                continue
            if eof:
                if total:
                    self.full.put((buf, total, self.decoded, decoder.consumed))
                break
            nl = buf.rfind(b"\n", 0, total)
            if nl < 0:  # one line fills the buffer: cut it, skip its rest
                self.lines_cut += 1
                cut = bytearray(bytes(view[:cap]) + CUT_MARK % cap + b"\n")
                self.free.put(buf)
                self.full.put((cut, len(cut), self.decoded, decoder.consumed))
                skipping = True
                continue
            carry = bytes(view[nl + 1: total])
            self.full.put((buf, nl + 1, self.decoded, decoder.consumed))
        self.full.put(_END)

    def _limit_crossed(self) -> bool:
        limits = self.limits
        return limits is not None and (limits.expired() or (
            self.decoder.encoding != "plain" and limits.ratio_exceeded(self.decoded, self.decoder.consumed)))

    def _free_buffer(self) -> bytearray | None:
        """A buffer the scan has handed back, or a new one while fewer than BUFFERS exist (made
        here, not by the scanning thread: zero-filling 8 MiB costs milliseconds of page faults)."""
        try:
            return self.free.get_nowait()
        except queue.Empty:
            pass
        if len(self.pool) < BUFFERS:
            self.pool.append(bytearray(self.chunk_size))
            return self.pool[-1]
        return self.free.get()

    def close(self) -> None:
        self.stop.set()
        self.free.put(None)
        # a thread blocked reading a pipe (stdin) ends with the process: it is a daemon
        self.thread.join(timeout=2.0)


def _ratio_warning(encoding: str, limits: Limits, decoded: int, consumed: int) -> str:
    return (f"{encoding} stream expands more than {limits.max_ratio:g}x (LOGDX_MAX_DECOMPRESSION_RATIO): "
            f"stopped after {decoded} decompressed bytes from {consumed} compressed; this is a partial diagnosis")


class DecodedBuffers:
    """Line-aligned chunks of any source (gzip, zstd or plain; path, `-` or file object) as
    `(buffer, length)` when iterated, each valid until the next one. The decoding thread starts
    when this is made, so it runs while the caller builds what it needs (the compressor's
    matchers); `close` (or the `with` block's end) stops it. A corrupt or truncated archive yields
    what decodes, with a warning in `report`; `limits` end reading early (partial, with a warning).
    `on_consumed(n)`: n more compressed bytes were read (progress of a compressed file)."""

    def __init__(self, source: str | Path | BinaryIO, report: IngestReport, *,
                 chunk_size: int = CHUNK_SIZE, line_cap: int = LINE_CAP, limits: Limits | None = None,
                 on_consumed: Callable[[int], None] | None = None) -> None:
        self._report = report
        self._limits = limits
        self._on_consumed = on_consumed
        self._raw, self._owned = _open_binary(source)
        self._filler: _Filler | None = None
        try:
            self._decoder = _Decoder(self._raw, report)
            self._filler = _Filler(self._decoder, chunk_size, line_cap, limits)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> DecodedBuffers:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __iter__(self) -> Iterator[tuple[bytearray, int]]:
        report, limits, filler, on_consumed = self._report, self._limits, self._filler, self._on_consumed
        if filler is None:
            raise ValueError("DecodedBuffers is closed")
        consumed_seen = 0
        while True:
            if limits is not None and limits.expired():
                report.warnings.append(deadline_warning(report.bytes_read))
                report.cut_short = True
                break
            item = filler.full.get()
            if item is _END:  # (bytes decoded while skipping the rest of a cut line count too)
                report.bytes_read = filler.decoded
                break
            if item is _LIMIT:
                report.bytes_read = filler.decoded
                report.cut_short = True
                report.warnings.append(deadline_warning(filler.decoded) if limits.expired() else _ratio_warning(
                    report.encoding, limits, filler.decoded, self._decoder.consumed))
                break
            if isinstance(item, BaseException):
                raise item
            buf, length, decoded, consumed = item
            report.bytes_read = decoded
            if on_consumed is not None and consumed > consumed_seen:
                on_consumed(consumed - consumed_seen)
                consumed_seen = consumed
            # (the decoding thread checked the limits on these counts before handing the buffer over)
            yield buf, length
            if any(buf is mine for mine in filler.pool):  # (a cut line comes in its own buffer)
                filler.free.put(buf)

    def close(self) -> None:
        filler, self._filler = self._filler, None
        if filler is not None:
            filler.close()
            self._report.lines_cut += filler.lines_cut
        if self._owned and self._raw is not None:
            self._raw.close()
        self._raw = None


def iter_decoded_buffers(source: str | Path | BinaryIO, report: IngestReport, *,
                         chunk_size: int = CHUNK_SIZE, line_cap: int = LINE_CAP,
                         limits: Limits | None = None,
                         on_consumed: Callable[[int], None] | None = None) -> Iterator[tuple[bytearray, int]]:
    """DecodedBuffers as a generator: the decoding starts at the first iteration."""
    with DecodedBuffers(source, report, chunk_size=chunk_size, line_cap=line_cap, limits=limits,
                        on_consumed=on_consumed) as buffers:
        yield from buffers
