"""Streaming request bodies to disk. Bodies are never held in memory: they are read piece by
piece from `request.stream()`, buffered up to `upload_chunk_bytes`, and written (with hashing and
the decode check) in a worker thread so the event loop stays free."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import anyio
from starlette.requests import ClientDisconnect, Request

from app.errors import BadRequest, Conflict, PayloadTooLarge, UnsupportedMediaType
from app.logs.codec import StreamCheck

ACCEPTED_TYPES = {
    "application/octet-stream", "application/gzip", "application/x-gzip", "application/zstd",
    "application/x-zstd", "application/x-ndjson", "application/x-log",
    # what `curl --data-binary @job.log` sends when no type is given: the body is still the raw log
    "application/x-www-form-urlencoded",
}


def _private(path: str, flags: int) -> int:
    """Raw logs may hold secrets: files logdx writes are owner-only (0600)."""
    return os.open(path, flags, 0o600)


def check_content_type(request: Request) -> None:
    raw = request.headers.get("content-type")
    if not raw:
        return
    main = raw.split(";", 1)[0].strip().lower()
    if main in ACCEPTED_TYPES or main.startswith("text/"):
        return
    raise UnsupportedMediaType(
        f"a log is sent as the raw request body (text/plain, application/octet-stream, "
        f"application/gzip or application/zstd), not {main}; e.g. curl --data-binary @job.log",
        detail={"content_type": main, "accepted": sorted(ACCEPTED_TYPES | {"text/*"})})


def declared_length(request: Request) -> int | None:
    raw = request.headers.get("content-length")
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest("Content-Length is not a number") from None
    return value if value >= 0 else None


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"log exceeds the upload limit of {limit} bytes (LOGDX_MAX_UPLOAD_BYTES)",
                           detail={"limit": limit})


async def _pieces(request: Request, buffer_bytes: int):  # noqa: ANN202
    """Yield the body in pieces of about `buffer_bytes`."""
    buf = bytearray()
    try:
        async for part in request.stream():
            buf += part
            if len(buf) >= buffer_bytes:
                yield bytes(buf)
                buf.clear()
    except ClientDisconnect:
        raise BadRequest("client disconnected before the body was complete") from None
    if buf:
        yield bytes(buf)


@dataclass
class Spooled:
    path: Path
    check: StreamCheck


def _write_checked(fh: BinaryIO, check: StreamCheck, data: bytes) -> None:
    check.feed(data)
    fh.write(data)


def _close_synced(fh: BinaryIO, check: StreamCheck | None = None, durable: bool = True) -> None:
    if check is not None:
        check.finish()
    fh.flush()
    if durable:
        os.fsync(fh.fileno())
    fh.close()


async def spool_body(request: Request, *, spool: Path, limit: int, buffer_bytes: int,
                     validate: bool = True, durable: bool = True, max_ratio: float | None = None) -> Spooled:
    """Write the whole body to `spool` while hashing and decode-checking it; fsynced when
    `durable` (it will be kept), not for throw-away one-shot bodies."""
    length = declared_length(request)
    if length is not None and length > limit:
        raise _too_large(limit)
    check = StreamCheck(validate=validate, max_ratio=max_ratio)
    fh = open(spool, "wb", opener=_private)  # noqa: SIM115
    try:
        size = 0
        async for piece in _pieces(request, buffer_bytes):
            size += len(piece)
            if size > limit:
                raise _too_large(limit)
            await anyio.to_thread.run_sync(_write_checked, fh, check, piece)
        await anyio.to_thread.run_sync(_close_synced, fh, check, durable)
    except BaseException:
        fh.close()
        spool.unlink(missing_ok=True)
        raise
    return Spooled(spool, check)


@dataclass
class AppendResult:
    size: int        # bytes in the log after this request (the next offset)
    appended: int    # new bytes written
    received: int    # body bytes


class _Appender:
    """Compares the part of a chunk that overlaps bytes already stored and appends the rest."""

    def __init__(self, path: Path, offset: int, *, frozen: bool, limit: int) -> None:
        self.fh = open(path, "r+b" if path.exists() else "w+b", opener=_private)  # noqa: SIM115
        self.size = os.fstat(self.fh.fileno()).st_size
        self.pos = offset
        self.frozen = frozen
        self.limit = limit
        self.appended = 0
        if offset > self.size:
            self.fh.close()
            raise Conflict(f"chunk starts at offset {offset} but the log holds {self.size} bytes; "
                           f"resume from offset {self.size}",
                           detail={"offset": self.size, "requested_offset": offset}, code="offset_gap")

    def feed(self, data: bytes) -> None:
        overlap = max(0, min(len(data), self.size - self.pos))
        if overlap:
            self.fh.seek(self.pos)
            if self.fh.read(overlap) != data[:overlap]:
                raise Conflict(f"bytes at offset {self.pos} differ from the ones already stored; "
                               f"the log holds {self.size} bytes",
                               detail={"offset": self.size, "requested_offset": self.pos},
                               code="offset_mismatch")
        rest = data[overlap:]
        if rest:
            if self.frozen:
                raise Conflict("the log is complete; no more chunks are accepted",
                               detail={"offset": self.size}, code="log_complete")
            if self.size + len(rest) > self.limit:
                raise _too_large(self.limit)
            self.fh.seek(0, os.SEEK_END)
            self.fh.write(rest)
            self.size += len(rest)
            self.appended += len(rest)
        self.pos += len(data)

    def close(self) -> None:
        if self.appended:
            self.fh.flush()
            os.fsync(self.fh.fileno())
        self.fh.close()


async def append_body(request: Request, *, path: Path, offset: int, frozen: bool, limit: int,
                      buffer_bytes: int) -> AppendResult:
    """Append the body at `offset` to the append-only file `path` (idempotent by offset)."""
    length = declared_length(request)
    # a gap is reported first (409 offset_gap with where to resume), whatever the chunk's size
    appender = await anyio.to_thread.run_sync(
        lambda: _Appender(path, offset, frozen=frozen, limit=limit))
    if length is not None and offset + length > limit:
        await anyio.to_thread.run_sync(appender.close)
        raise _too_large(limit)
    received = 0
    try:
        async for piece in _pieces(request, buffer_bytes):
            received += len(piece)
            await anyio.to_thread.run_sync(appender.feed, piece)
    finally:
        await anyio.to_thread.run_sync(appender.close)
    return AppendResult(size=appender.size, appended=appender.appended, received=received)


def hash_file(path: Path, limit: int | None = None) -> StreamCheck:
    check = StreamCheck(validate=True)
    left = limit
    with open(path, "rb") as fh:
        while True:
            want = 1 << 20 if left is None else min(1 << 20, left)
            data = fh.read(want) if want else b""
            if not data:
                break
            check.feed(data)
            if left is not None:
                left -= len(data)
    check.finish()
    return check
