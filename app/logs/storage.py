"""Raw log bytes on disk. Finished logs are content-addressed (`blobs/<sha[:2]>/<sha>`); chunked
logs grow in `uploads/log-<id>.part` until sealed. Uploads are spooled to `spool/` first and
moved into place only after fsync, so a crash never leaves a half-written blob under its hash."""

from __future__ import annotations

import io
import os
import uuid
from pathlib import Path
from typing import BinaryIO

from app.settings import Settings


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class BlobStore:
    def __init__(self, settings: Settings) -> None:
        self.blob_dir = settings.blob_dir
        self.spool_dir = settings.spool_dir
        self.uploads_dir = settings.uploads_dir

    def blob_path(self, sha256: str) -> Path:
        return self.blob_dir / sha256[:2] / sha256

    def part_path(self, log_id: int) -> Path:
        return self.uploads_dir / f"log-{log_id}.part"

    def new_spool(self) -> Path:
        return self.spool_dir / f"{uuid.uuid4().hex}.tmp"

    def commit_spool(self, spool: Path, sha256: str) -> Path:
        """Move a fully written, fsynced spool file to its content address (idempotent)."""
        dest = self.blob_path(sha256)
        if dest.exists():
            spool.unlink(missing_ok=True)
            return dest
        dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.replace(spool, dest)
        _fsync_dir(dest.parent)
        return dest

    def seal_part(self, log_id: int, sha256: str) -> Path:
        """Give a finished chunked log its content address; the part file is removed later."""
        dest = self.blob_path(sha256)
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            try:
                os.link(self.part_path(log_id), dest)
            except FileExistsError:
                pass
            _fsync_dir(dest.parent)
        return dest

    def check_writable(self) -> None:
        """Write, fsync and remove a small file in each directory uploads are written to: raises
        the OSError (ENOSPC, EROFS, EACCES) that the next upload would meet."""
        for directory in (self.spool_dir, self.blob_dir, self.uploads_dir):
            probe = directory / f".ready-{uuid.uuid4().hex}.tmp"
            try:
                fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                try:
                    os.write(fd, b"\0" * 4096)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            finally:
                probe.unlink(missing_ok=True)

    def clean_spool(self) -> int:
        """Remove spool files left by uploads that a crash interrupted."""
        removed = 0
        for path in self.spool_dir.glob("*.tmp"):
            path.unlink(missing_ok=True)
            removed += 1
        return removed


class BoundedReader(io.RawIOBase):
    """Reads at most `limit` bytes of `raw`: a diagnosis sees the log as it was when requested,
    even while chunks keep being appended."""

    def __init__(self, raw: BinaryIO, limit: int) -> None:
        self._raw = raw
        self._left = limit

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if self._left <= 0:
            return b""
        n = self._left if n is None or n < 0 else min(n, self._left)
        data = self._raw.read(n)
        self._left -= len(data)
        return data

    def readinto(self, buf) -> int:  # noqa: ANN001
        data = self.read(len(buf))
        buf[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._raw.close()
        super().close()
