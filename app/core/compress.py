"""Compress a log source: sequentially for streams and gz/zst, in byte ranges for large plain
files (the first range in this process, each further one in a forked child, one per core;
findings merged in order)."""

from __future__ import annotations

import gc
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from app.core.compressed import CompressedLog, Partial, build_log, merge_partials
from app.core.compressor import Compressor, ShapeTable
from app.core.ingest import CHUNK_SIZE, GZIP_MAGIC, ZSTD_MAGIC, IngestReport, Limits, iter_file_buffers
from app.core.readahead import DecodedBuffers
from app.core.rules import RuleSet

__all__ = ["CompressedLog", "Compressor", "ShapeTable", "compress_source"]

PARALLEL_MIN_BYTES = 64 * 1024 * 1024
_WORKER_RULESET: RuleSet | None = None  # set in the parent before forking workers
_WORKER_PROGRESS = None  # a _Progress (bytes scanned per worker, shared), when progress is wanted
PROGRESS_POLL_S = 0.2


def _plain_file(source: str | Path | BinaryIO) -> Path | None:
    """A path to an uncompressed regular file (which can be split into byte ranges), else None."""
    if not isinstance(source, (str, Path)) or str(source) == "-":
        return None
    path = Path(source)
    try:
        if not path.is_file():
            return None
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError:
        return None
    if head.startswith(GZIP_MAGIC) or head.startswith(ZSTD_MAGIC):
        return None
    return path


def _regular_file(source: str | Path | BinaryIO) -> bool:
    if not isinstance(source, (str, Path)) or str(source) == "-":
        return False
    try:
        return Path(source).is_file()
    except OSError:
        return False


def _ranges(path: Path, parts: int) -> list[tuple[int, int]]:
    """Split a file into `parts` byte ranges that start at line starts."""
    size = path.stat().st_size
    cuts = [0]
    with open(path, "rb") as fh:
        for k in range(1, parts):
            fh.seek(max(cuts[-1], size * k // parts))
            fh.readline()
            cuts.append(min(fh.tell(), size))
    cuts.append(size)
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


def _compress_range(args: tuple[str, int, int, int, bool, Limits | None],
                    tick: Callable[[], None] | None = None) -> tuple[Partial, IngestReport]:
    path, start, end, chunk_size, use_c, limits = args
    assert _WORKER_RULESET is not None
    report = IngestReport()
    comp = Compressor(_WORKER_RULESET, use_c=use_c)
    comp.rank_hosts.budget -= start  # NCCL init lines are looked for at the start of the log only
    done = _WORKER_PROGRESS
    for buf, length in iter_file_buffers(Path(path), report, start, end, chunk_size=chunk_size, limits=limits):
        comp.feed_buffer(buf, length)
        if done is not None:
            done.add(length)
            if tick is not None:
                tick()
    return comp.partial(), report


class _Progress:
    """Bytes scanned by each range worker, in an anonymous shared mapping made before the fork:
    one 8-byte counter per worker, each written by its worker only (no lock), summed by the parent."""

    def __init__(self, workers: int) -> None:
        import mmap

        self._map = mmap.mmap(-1, 8 * workers)
        self.slot = 0  # the counter this process writes (set in each child after the fork)

    def add(self, n: int) -> None:
        at = 8 * self.slot
        self._map[at:at + 8] = (int.from_bytes(self._map[at:at + 8], "little") + n).to_bytes(8, "little")

    def total(self) -> int:
        data = self._map[:]
        return sum(int.from_bytes(data[i:i + 8], "little") for i in range(0, len(data), 8))


def _fork_range(job, slot: int) -> tuple[int, int]:
    """Fork a child that scans one byte range and writes its pickled findings (or the exception
    that stopped it) to a pipe; returns (pid, read end). os.fork rather than multiprocessing: no
    package to import (~5 ms of a CLI run) and nothing to start but the child itself."""
    import pickle

    read_fd, write_fd = os.pipe()
    try:  # a 1 MiB pipe: the findings (MBs with thousands of templates) cross in a few reads
        import fcntl

        fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, 1 << 20)
    except (ImportError, AttributeError, OSError):  # (not Linux, or over the system's limit)
        pass
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            os.close(read_fd)
            if _WORKER_PROGRESS is not None:
                _WORKER_PROGRESS.slot = slot
            try:
                result = ("ok", _compress_range(job))
            except BaseException as exc:  # handed to the parent, which raises it
                result = ("error", exc)
            gc.disable()  # (building and pickling thousands of rows would set off full collections)
            try:
                data = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as exc:  # (an exception or finding that does not pickle)
                data = pickle.dumps(("error", RuntimeError(f"compression worker failed: {exc!r}")))
            with open(write_fd, "wb", closefd=True) as out:
                out.write(data)
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    return pid, read_fd


def _stop(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)


class _PipeReader:
    """A thread that reads a child's findings from its pipe as they come (the child's write does
    not wait for this process to finish its own range, and nothing is left to read after it)."""

    def __init__(self, read_fd: int) -> None:
        import threading

        self._pipe = open(read_fd, "rb", buffering=0, closefd=True)
        self.chunks: list[bytes] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="logdx-findings", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            with self._pipe:
                while piece := self._pipe.read(1 << 20):
                    self.chunks.append(piece)
        except BaseException as exc:  # (raised by the caller)
            self.error = exc


def _child_result(pid: int, reader: _PipeReader, on_wait: Callable[[], None] | None):
    """The findings a forked range worker sent; a child that died before sending them all is an
    error naming its exit code (reaped here), never a wait. A child whose findings arrived whole
    is left for the caller to reap (`os.waitpid`) once they are merged: its exit, freeing its
    memory, takes a few ms that the merge need not wait for."""
    import pickle

    try:
        while True:
            reader.thread.join(PROGRESS_POLL_S if on_wait is not None else None)
            if not reader.thread.is_alive():
                break
            on_wait()
    except BaseException:
        _stop(pid)
        raise
    if reader.error is not None:
        _stop(pid)
        raise reader.error
    data = b"".join(reader.chunks)
    if data:
        enabled = gc.isenabled()
        gc.disable()  # (unpickling thousands of rows would set off collections of the whole heap)
        try:
            return pickle.loads(data)  # (a pickle cut short does not load: the child died writing it)
        except Exception:
            pass
        finally:
            if enabled:
                gc.enable()
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)  # (-N: killed by signal N)
    raise RuntimeError(f"a compression worker died (exit code {code})" if code else
                       "a compression worker's findings were cut short")


def _compress_parallel(path: Path, ruleset: RuleSet, workers: int, chunk_size: int,
                       on_progress: Callable[[int], None] | None, use_c: bool,
                       limits: Limits | None = None) -> CompressedLog:
    """The first byte range is scanned here, the others by forked children (one per further
    core) that send back their findings; a child that dies is an error, not a wait."""
    global _WORKER_RULESET, _WORKER_PROGRESS
    _WORKER_RULESET = ruleset
    ranges = _ranges(path, workers)
    # bytes scanned, shared through fork; the parent turns it into progress
    _WORKER_PROGRESS = _Progress(len(ranges)) if on_progress else None
    args = [(str(path), a, b, chunk_size, use_c, limits) for a, b in ranges]
    reported = 0

    def report_progress() -> None:
        nonlocal reported
        done = _WORKER_PROGRESS.total() if _WORKER_PROGRESS is not None else 0
        if done > reported:
            on_progress(done - reported)
            reported = done

    forked: list[tuple[int, int]] = []
    children: list[tuple[int, _PipeReader]] = []
    done: list[int] = []  # children whose findings arrived, to reap once they are merged
    try:
        for slot, job in enumerate(args[1:], start=1):
            forked.append(_fork_range(job, slot))
        while forked:  # (every fork first: no thread of this process runs at a fork)
            pid, read_fd = forked[0]
            children.append((pid, _PipeReader(read_fd)))
            forked.pop(0)
        results = [_compress_range(args[0], report_progress if on_progress else None)]
        while children:
            pid, reader = children.pop(0)  # (reaped by _child_result if it died)
            status, value = _child_result(pid, reader, report_progress if on_progress else None)
            done.append(pid)
            if status == "error":
                raise value
            results.append(value)
        if on_progress:
            report_progress()
        merged = merge_partials([p for p, _ in results])
    finally:
        _WORKER_PROGRESS = None
        for pid, read_fd in forked:  # (only after an error: stop the others)
            os.close(read_fd)
            _stop(pid)
        for pid, _reader in children:
            _stop(pid)  # (its reader ends at the pipe's end)
        for pid in done:
            os.waitpid(pid, 0)
    report = IngestReport()
    for _, r in results:
        report.bytes_read += r.bytes_read
        report.lines_cut += r.lines_cut
        report.warnings.extend(r.warnings)
        report.cut_short = report.cut_short or r.cut_short
    return build_log(merged, ruleset, report)


def _can_fork() -> bool:
    return hasattr(os, "fork")


def compress_source(source: str | Path | BinaryIO, ruleset: RuleSet, *,
                    chunk_size: int = CHUNK_SIZE, workers: int | None = None, use_c: bool = True,
                    on_progress: Callable[[int], None] | None = None,
                    limits: Limits | None = None) -> CompressedLog:
    """Compress a log. Large plain files are split into byte ranges scanned by `workers`
    processes (default: one per CPU); streams and gz/zst are read sequentially. `limits`: a
    deadline and a decompression-ratio limit that end reading early (partial, with a warning)."""
    workers = workers if workers is not None else (os.cpu_count() or 1)
    path = _plain_file(source)
    if workers > 1 and path is not None and path.stat().st_size >= PARALLEL_MIN_BYTES and _can_fork():
        return _compress_parallel(path, ruleset, workers, chunk_size, on_progress, use_c, limits)
    report = IngestReport()
    if path is not None:
        comp = Compressor(ruleset, use_c=use_c)
        for buf, length in iter_file_buffers(path, report, chunk_size=chunk_size, limits=limits):
            comp.feed_buffer(buf, length)
            if on_progress:
                on_progress(length)
        return comp.finish(report)
    # gz/zst files and streams: decoded by a thread into reused buffers, ahead of the scan (it
    # starts before the compressor builds its matchers); the progress of a compressed file is in
    # compressed bytes (the only total known in advance)
    compressed_file = on_progress is not None and _regular_file(source)
    # (by a forked child where another process is allowed and fork exists: it never waits for
    # this one's GIL)
    with DecodedBuffers(source, report, chunk_size=chunk_size, limits=limits,
                        on_consumed=on_progress if compressed_file else None,
                        decode_process=workers > 1) as buffers:
        comp = Compressor(ruleset, use_c=use_c)
        for buf, length in buffers:
            comp.feed_buffer(buf, length)
            if on_progress and not compressed_file:
                on_progress(length)
    return comp.finish(report)
