"""Progress of a batch: a bar (files, MB, rate, ETA) on a terminal, a plain line every few
seconds otherwise (CI logs, cron mail)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

LINE_EVERY_S = 10.0


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


class ProgressView:
    def __init__(self, *, files: int, total_bytes: int, label: str = "relabel", stream: TextIO | None = None,
                 tty: bool | None = None, every_s: float = LINE_EVERY_S) -> None:
        self.files, self.total_bytes, self.label = files, total_bytes, label
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.every_s = every_s
        self.started = time.monotonic()
        self._base: tuple[int, int] | None = None  # what was done before this process (resume)
        self._last_line = 0.0
        self._last: tuple[int, int] = (0, 0)
        self._bar = None
        if self.tty:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TextColumn("{task.fields[mb]}"),
                                 TextColumn("{task.fields[rate]}"), TimeRemainingColumn(),
                                 console=Console(file=self.stream), transient=False)
            self._task = self._bar.add_task(label, total=files, mb="", rate="")
            self._bar.start()

    def line(self, done: int, done_bytes: int) -> str:
        base_files, base_bytes = self._base or (0, 0)
        elapsed = max(time.monotonic() - self.started, 1e-6)
        rate = (done - base_files) / elapsed
        mb_rate = (done_bytes - base_bytes) / elapsed / 1e6
        left = self.files - done
        eta = _duration(left / rate) if rate > 0 and left else ("0s" if not left else "?")
        return (f"{self.label}: {done}/{self.files} files, {done_bytes / 1e6:.1f}/{self.total_bytes / 1e6:.1f} MB, "
                f"{rate:.1f} files/s, {mb_rate:.1f} MB/s, ETA {eta}")

    def update(self, done: int, done_bytes: int) -> None:
        if self._base is None:
            self._base = (done, done_bytes)
        self._last = (done, done_bytes)
        if self._bar is not None:
            base_files, base_bytes = self._base
            elapsed = max(time.monotonic() - self.started, 1e-6)
            self._bar.update(self._task, completed=done,
                             mb=f"{done_bytes / 1e6:.1f}/{self.total_bytes / 1e6:.1f} MB",
                             rate=f"{(done - base_files) / elapsed:.1f} files/s "
                                  f"{(done_bytes - base_bytes) / elapsed / 1e6:.1f} MB/s")
            return
        now = time.monotonic()
        if now - self._last_line >= self.every_s:
            self._last_line = now
            print(self.line(done, done_bytes), file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        else:
            print(self.line(*self._last), file=self.stream, flush=True)
