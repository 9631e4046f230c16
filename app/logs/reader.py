"""Reading a stored raw log without loading it: a literal search (with a rank/host filter) and a
range of lines, both streamed from the blob through `app.core.ingest.iter_chunks` (gzip and zstd
decoded on the way; memory bounded by one chunk). Line numbers are the pipeline's: 1-based,
lines split on `\\n`, so evidence line N of a diagnosis is line N here."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from app.core.fields import extract_host, extract_rank
from app.core.ingest import IngestReport, iter_chunks
from app.core.secrets import redact

MAX_MATCHES = 1000  # kept for the page; the count goes on
MAX_RANGE = 2000  # lines in one range view
MAX_SHOWN = 4000  # characters of one line shown
READ_CHUNK = 1 << 20


@dataclass
class LogLine:
    number: int
    text: str  # decoded, secrets redacted, cut to MAX_SHOWN
    rank: int | None = None
    host: str | None = None


@dataclass
class Search:
    matches: list[LogLine] = field(default_factory=list)  # the first MAX_MATCHES, in log order
    total: int = 0
    warnings: list[str] = field(default_factory=list)

    @property
    def truncated(self) -> bool:
        return self.total > len(self.matches)


def _show(raw: bytes, number: int) -> LogLine:
    text = raw.rstrip(b"\r").decode("utf-8", "replace")
    return LogLine(number=number, text=redact(text[:MAX_SHOWN]))


def _chunks(path: Path, report: IngestReport) -> Iterator[bytes]:
    return iter_chunks(path, report, chunk_size=READ_CHUNK)


def search(path: Path, needle: str | None, *, rank: int | None = None, host: str | None = None) -> Search:
    """Lines containing `needle` (literal, case-insensitive) and, when given, printed by that rank
    / host (as `app.core.fields` reads a line's prefix). At least one of the three is set."""
    out = Search()
    report = IngestReport()
    want = (needle or "").lower().encode()
    base = 0  # lines before this chunk
    for chunk in _chunks(path, report):
        if want:
            hay = chunk.lower()
            pos = hay.find(want)
            counted, counted_to = base, 0
            while pos != -1:
                start = chunk.rfind(b"\n", 0, pos) + 1
                end = chunk.find(b"\n", pos)
                end = len(chunk) if end == -1 else end
                counted += chunk.count(b"\n", counted_to, start)
                counted_to = start
                _consider(out, chunk[start:end], counted + 1, rank, host)
                pos = hay.find(want, end + 1)
        else:
            for i, raw in enumerate(chunk.split(b"\n")[: chunk.count(b"\n") + (0 if chunk.endswith(b"\n") else 1)]):
                _consider(out, raw, base + i + 1, rank, host)
        base += chunk.count(b"\n")
    out.warnings = list(report.warnings)
    return out


def _consider(out: Search, raw: bytes, number: int, rank: int | None, host: str | None) -> None:
    if rank is not None or host is not None:
        text = raw.decode("utf-8", "replace")
        if rank is not None and extract_rank(text) != rank:
            return
        if host is not None and extract_host(text) != host:
            return
    out.total += 1
    if len(out.matches) < MAX_MATCHES:
        line = _show(raw, number)
        out.matches.append(line)


def lines(path: Path, first: int, last: int) -> tuple[list[LogLine], bool]:
    """Lines first..last (1-based, inclusive, at most MAX_RANGE), and whether the log goes on
    after them. Reading stops at `last`: the rest of the log is not decoded."""
    first = max(1, first)
    last = min(last, first + MAX_RANGE - 1)
    out: list[LogLine] = []
    report = IngestReport()
    base = 0
    chunks = _chunks(path, report)
    try:
        for chunk in chunks:
            n = chunk.count(b"\n") + (0 if chunk.endswith(b"\n") else 1)
            if base + n >= first:
                parts = chunk.split(b"\n")
                for i in range(max(0, first - base - 1), n):
                    number = base + i + 1
                    if number > last:
                        return out, True
                    line = _show(parts[i], number)
                    line.rank, line.host = extract_rank(line.text), extract_host(line.text)
                    out.append(line)
            base += chunk.count(b"\n")
            if base >= last:
                return out, next(chunks, None) is not None
    finally:
        chunks.close()
    return out, False
