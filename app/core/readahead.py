"""Decoded streams (gzip, zstd, stdin) read into reused buffers ahead of the scan, by a thread or
by a forked process.

zstd and zlib release the GIL while they decode, so on two cores a decoding thread runs next to
the scan; but it takes the GIL back after every piece it decodes, and waits for it (up to the
interpreter's switch interval) whenever the scan is running Python code. gzip is read in 16 KiB
pieces (for the decompression-ratio limit), so its thread waited often: a 500 MiB `.gz` was
diagnosed in 0.86-1.00 s that way, 0.72-0.79 s with a forked decoder (zstd, in 1 MiB pieces,
gains little: its decoder is slowed as much by the scan sharing the cache as by the GIL).
Where the caller allows another process (`decode_process`: the CLI, whose byte-range workers
fork too; not a server's diagnosis worker), a forked child decodes into buffers shared with this
process and never waits for its GIL.

A few buffers go round between the decoder and the scan: the decoder fills a free buffer
straight from the decompressor (`readinto`: no joins, no slices), ends it on a line boundary and
hands it over; the scan hands it back when it asks for the next one. Lines are cut and counted
exactly as `iter_file_buffers` does for plain files.
"""

from __future__ import annotations

import os
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
_LIMIT = object()  # the decoder saw a limit crossed (deadline, decompression ratio)


class _FillLoop:
    """The decoder's loop, the same in a thread and in a forked process: fills free buffers with
    whole lines. Subclasses say where buffers come from and where they go."""

    def __init__(self, decoder: _Decoder, chunk_size: int, line_cap: int, limits: Limits | None) -> None:
        self.decoder = decoder
        self.limits = limits
        self.chunk_size = chunk_size
        self.line_cap = line_cap
        self.decoded = 0  # bytes the decoder produced so far
        self.lines_cut = 0

    # what a subclass provides
    def _free_buffer(self) -> bytearray | None: ...  # None: stop
    def _stopped(self) -> bool: ...
    def _release(self, buf) -> None: ...  # a buffer that delivered nothing goes back to the free ones
    def _deliver(self, buf, length: int) -> None: ...
    def _deliver_cut(self, line: bytes) -> None: ...  # an overlong line, cut (in a buffer of its own)
    def _limit(self) -> None: ...
    def _end(self) -> None: ...

    def fill(self) -> None:
        decoder, size, cap = self.decoder, self.chunk_size, self.line_cap
        carry = b""  # the partial last line of the previous buffer
        skipping = False  # discarding the rest of a cut line
        eof = False
        first = True
        while not eof:
            buf = self._free_buffer()
            if buf is None or self._stopped():
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
                view.release()
                self._release(buf)
                self._limit()
                return
            total = have + n
            eof = decoder.done
            if skipping:
                nl = buf.find(b"\n", 0, total)
                if nl < 0:
                    view.release()
                    self._release(buf)
                    continue
                skipping = False
                carry = bytes(view[nl + 1: total])  # the cut line's rest is dropped
                view.release()
                self._release(buf)
                eof = eof and not carry
                if eof:
                    break
                continue
            if eof:
                view.release()
                if total:
                    self._deliver(buf, total)
                else:
                    self._release(buf)
                break
            nl = buf.rfind(b"\n", 0, total)
            if nl < 0:  # one line fills the buffer: cut it, skip its rest
                self.lines_cut += 1
                cut = bytes(view[:cap]) + CUT_MARK % cap + b"\n"
                view.release()
                self._release(buf)
                self._deliver_cut(cut)
                skipping = True
                continue
            carry = bytes(view[nl + 1: total])
            view.release()
            self._deliver(buf, nl + 1)
        self._end()

    def _limit_crossed(self) -> bool:
        limits = self.limits
        return limits is not None and (limits.expired() or (
            self.decoder.encoding != "plain" and limits.ratio_exceeded(self.decoded, self.decoder.consumed)))


class _Filler(_FillLoop):
    """The decoding thread."""

    def __init__(self, decoder: _Decoder, chunk_size: int, line_cap: int, limits: Limits | None = None) -> None:
        super().__init__(decoder, chunk_size, line_cap, limits)
        self.free: queue.Queue = queue.Queue()
        self.full: queue.Queue = queue.Queue()
        self.stop = threading.Event()
        self.pool: list[bytearray] = []  # allocated by the decoding thread, as needed
        self.thread = threading.Thread(target=self._run, name="logdx-decode", daemon=True)
        self.thread.start()

    @property
    def consumed(self) -> int:
        return self.decoder.consumed

    def _run(self) -> None:
        try:
            self.fill()
        except BaseException as exc:  # handed to the scanning thread, which raises it
            self.full.put(exc)

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

    def _stopped(self) -> bool:
        return self.stop.is_set()

    def _release(self, buf) -> None:
        self.free.put(buf)

    def _deliver(self, buf, length: int) -> None:
        self.full.put((buf, length, self.decoded, self.decoder.consumed))

    def _deliver_cut(self, line: bytes) -> None:
        cut = bytearray(line)
        self.full.put((cut, len(cut), self.decoded, self.decoder.consumed))

    def _limit(self) -> None:
        self.full.put(_LIMIT)

    def _end(self) -> None:
        self.full.put(_END)

    # the scanning side
    def next_item(self):
        return self.full.get()

    def give_back(self, buf) -> None:
        if any(buf is mine for mine in self.pool):  # (a cut line comes in its own buffer)
            self.free.put(buf)

    def close(self) -> None:
        self.stop.set()
        self.free.put(None)
        # a thread blocked reading a pipe (stdin) ends with the process: it is a daemon
        self.thread.join(timeout=2.0)


class _ForkedFiller(_FillLoop):
    """The decoder in a forked child, filling anonymous shared mappings made before the fork.
    Messages go up a pipe (a fixed header: which buffer, how long, bytes decoded and consumed so
    far, and for a cut line, the end or an error, a payload); buffers come back down another as
    one byte each. The child reports its warnings (a corrupt or truncated stream: reading was cut
    short) and its count of cut lines with its last message. A child that dies is an error naming
    its exit code. The child runs only the decoder, `os.read`/`os.write` and pickle (imported
    here, before the fork): no lock another thread of this process could have held at the fork."""

    _DATA, _CUT, _LIMIT, _END, _ERROR = range(5)

    def __init__(self, decoder: _Decoder, report: IngestReport, chunk_size: int, line_cap: int,
                 limits: Limits | None = None) -> None:
        import mmap
        import pickle  # noqa: F401  (for the child's last message: imported before the fork)
        import struct

        super().__init__(decoder, chunk_size, line_cap, limits)
        self._head = struct.Struct("<BiqqqI")  # kind, buffer, length, decoded, consumed, payload bytes
        self.pool = [mmap.mmap(-1, chunk_size) for _ in range(BUFFERS)]  # (MAP_SHARED)
        self._index = {id(m): i for i, m in enumerate(self.pool)}
        self._report = report
        self._warnings_before = len(report.warnings)
        self.consumed = decoder.consumed
        self._pid = 0
        self._done = False  # the child sent its last message
        up_r, up_w = os.pipe()
        down_r, down_w = os.pipe()
        try:
            pid = os.fork()
        except BaseException:
            for fd in (up_r, up_w, down_r, down_w):
                os.close(fd)
            raise
        if pid == 0:  # the child: never returns
            os.close(up_r)
            os.close(down_w)
            self._child(up_w, down_r)
        self._pid = pid
        os.close(up_w)
        os.close(down_r)
        self._up = open(up_r, "rb", closefd=True)  # (buffered: a header and its payload, whole)
        self._down = down_w

    # ---- the child ----------------------------------------------------------------------------
    def _child(self, up_w: int, down_r: int) -> None:
        code = 1
        try:
            self._out = up_w
            self._back = down_r
            self._free = list(self.pool)
            try:
                self.fill()
                code = 0
            except BaseException as exc:  # handed to the parent, which raises it
                self._send(self._ERROR, payload=self._closing(exc))
        finally:
            os._exit(code)

    def _send(self, kind: int, idx: int = -1, length: int = 0, payload: bytes = b"") -> None:
        msg = self._head.pack(kind, idx, length, self.decoded, self.decoder.consumed, len(payload)) + payload
        view = memoryview(msg)
        while view:
            view = view[os.write(self._out, view):]

    def _closing(self, exc: BaseException | None) -> bytes:
        import pickle

        report = self._report
        warnings = report.warnings[self._warnings_before:]
        try:
            return pickle.dumps((warnings, report.cut_short, self.lines_cut, exc))
        except Exception:  # (an exception that does not pickle)
            return pickle.dumps((warnings, report.cut_short, self.lines_cut, RuntimeError(f"decoding failed: {exc!r}")))

    def _free_buffer(self):
        # (this copy of the report is the child's own: what a corrupt-stream warning counts from)
        self._report.bytes_read = self.decoded
        if self._free:
            return self._free.pop()
        got = os.read(self._back, 1)
        if not got:  # the parent went away
            return None
        return self.pool[got[0]]

    def _stopped(self) -> bool:
        return False  # (the parent stops the child with a signal)

    def _release(self, buf) -> None:
        self._free.append(buf)

    def _deliver(self, buf, length: int) -> None:
        self._send(self._DATA, self._index[id(buf)], length)

    def _deliver_cut(self, line: bytes) -> None:
        self._send(self._CUT, payload=line)

    def _limit(self) -> None:
        self._send(self._LIMIT, payload=self._closing(None))

    def _end(self) -> None:
        self._send(self._END, payload=self._closing(None))

    # ---- the scanning side (the parent) ----------------------------------------------------------
    def next_item(self):
        import pickle

        if self._done:
            return _END
        head = self._up.read(self._head.size)
        if len(head) < self._head.size:
            return self._died()
        kind, idx, length, decoded, consumed, size = self._head.unpack(head)
        payload = self._up.read(size) if size else b""
        if len(payload) < size:  # (it died writing the message)
            return self._died()
        self.decoded, self.consumed = decoded, consumed
        if kind == self._DATA:
            return self.pool[idx], length, decoded, consumed
        if kind == self._CUT:
            cut = bytearray(payload)
            return cut, len(cut), decoded, consumed
        self._done = True
        warnings, cut_short, self.lines_cut, exc = pickle.loads(payload)
        self._report.warnings.extend(warnings)
        self._report.cut_short = self._report.cut_short or cut_short
        return {self._LIMIT: _LIMIT, self._END: _END}.get(kind, exc)

    def give_back(self, buf) -> None:
        idx = self._index.get(id(buf))
        if idx is not None and not self._done and buf is self.pool[idx]:
            try:
                os.write(self._down, bytes((idx,)))
            except OSError:  # (the child ended)
                pass

    def _died(self) -> RuntimeError:
        self._done = True
        return RuntimeError(f"the decoding process died (exit code {self._reap()})")

    def _reap(self) -> int:
        pid, self._pid = self._pid, 0
        if not pid:
            return 0
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status)

    def close(self) -> None:
        import signal

        if self._pid and not self._done:
            try:
                os.kill(self._pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._reap()
        self._up.close()
        if self._down >= 0:
            os.close(self._down)
            self._down = -1
        for m in self.pool:
            try:
                m.close()
            except BufferError:  # (a view of it is still held: freed with it)
                pass


def _ratio_warning(encoding: str, limits: Limits, decoded: int, consumed: int) -> str:
    return (f"{encoding} stream expands more than {limits.max_ratio:g}x (LOGDX_MAX_DECOMPRESSION_RATIO): "
            f"stopped after {decoded} decompressed bytes from {consumed} compressed; this is a partial diagnosis")


class DecodedBuffers:
    """Line-aligned chunks of any source (gzip, zstd or plain; path, `-` or file object) as
    `(buffer, length)` when iterated, each valid until the next one. The decoder starts when this
    is made, so it runs while the caller builds what it needs (the compressor's matchers); `close`
    (or the `with` block's end) stops it. A corrupt or truncated archive yields what decodes,
    with a warning in `report`; `limits` end reading early (partial, with a warning).
    `on_consumed(n)`: n more compressed bytes were read (progress of a compressed file).
    `decode_process`: a compressed stream is decoded by a forked child (where fork exists), else
    (and a plain stream always) by a thread."""

    def __init__(self, source: str | Path | BinaryIO, report: IngestReport, *,
                 chunk_size: int = CHUNK_SIZE, line_cap: int = LINE_CAP, limits: Limits | None = None,
                 on_consumed: Callable[[int], None] | None = None, decode_process: bool = False) -> None:
        self._report = report
        self._limits = limits
        self._on_consumed = on_consumed
        self._raw, self._owned = _open_binary(source)
        self._filler: _Filler | _ForkedFiller | None = None
        self.decoder_kind = ""  # "process" or "thread"
        try:
            decoder = _Decoder(self._raw, report)
            if decode_process and decoder.encoding != "plain" and hasattr(os, "fork"):
                self._filler = _ForkedFiller(decoder, report, chunk_size, line_cap, limits)
                self.decoder_kind = "process"
            else:
                self._filler = _Filler(decoder, chunk_size, line_cap, limits)
                self.decoder_kind = "thread"
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
            item = filler.next_item()
            if item is _END:  # (bytes decoded while skipping the rest of a cut line count too)
                report.bytes_read = filler.decoded
                break
            if item is _LIMIT:
                report.bytes_read = filler.decoded
                report.cut_short = True
                report.warnings.append(deadline_warning(filler.decoded) if limits.expired() else _ratio_warning(
                    report.encoding, limits, filler.decoded, filler.consumed))
                break
            if isinstance(item, BaseException):
                raise item
            buf, length, decoded, consumed = item
            report.bytes_read = decoded
            if on_consumed is not None and consumed > consumed_seen:
                on_consumed(consumed - consumed_seen)
                consumed_seen = consumed
            # (the decoder checked the limits on these counts before handing the buffer over)
            yield buf, length
            filler.give_back(buf)

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
                         on_consumed: Callable[[int], None] | None = None,
                         decode_process: bool = False) -> Iterator[tuple[bytearray, int]]:
    """DecodedBuffers as a generator: the decoding starts at the first iteration."""
    with DecodedBuffers(source, report, chunk_size=chunk_size, line_cap=line_cap, limits=limits,
                        on_consumed=on_consumed, decode_process=decode_process) as buffers:
        yield from buffers
