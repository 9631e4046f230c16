"""Archives of old job logs: finding the files (a directory, walked, or a glob), the human label
a file may come with, and copying one into the blob store (streamed, hashed, decode-checked, like
an upload). No database here."""

from __future__ import annotations

import glob
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from app.errors import InvalidInput
from app.logs.codec import StreamCheck
from app.logs.storage import BlobStore

# files in a log directory that are not logs
SKIP_SUFFIXES = (".json", ".jsonl", ".md", ".yaml", ".yml", ".csv", ".lock", ".tmp")
LABEL_SIDECAR = "label.json"
COPY_PIECE = 1 << 20
MAX_EXTERNAL_ID = 256


@dataclass(frozen=True)
class ArchiveFile:
    path: str
    size: int
    external_id: str  # the job's id in the store: the path relative to the archive root
    human_error_type: str | None  # from a label sidecar, if there is one


def _is_log(path: Path) -> bool:
    name = path.name
    return not name.startswith(".") and not name.lower().endswith(SKIP_SUFFIXES)


def _label_of(path: Path, alone: bool) -> str | None:
    """`<file>.label.json`, or `label.json` beside a file that is alone in its directory (the
    realworld corpus layout). The label's `root_cause` (or `error_type`) is a human label."""
    for candidate in (path.with_name(path.name + ".label.json"), path.with_name(LABEL_SIDECAR) if alone else None):
        if candidate is None or not candidate.is_file():
            continue
        try:
            data = json.loads(candidate.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        value = data.get("root_cause") or data.get("error_type") if isinstance(data, dict) else None
        return value if isinstance(value, str) and value else None
    return None


def _external_id(path: Path, root: Path) -> str:
    try:
        rel = str(path.relative_to(root))
    except ValueError:
        rel = str(path)
    if len(rel) > MAX_EXTERNAL_ID:
        rel = rel[: MAX_EXTERNAL_ID - 17] + "~" + hashlib.sha256(rel.encode()).hexdigest()[:16]
    return rel


def discover(spec: str) -> list[ArchiveFile]:
    """Every log under a directory (recursively), or every file a glob names (`**` allowed).
    Sorted by path, so that item order and resumption are stable."""
    target = Path(spec).expanduser()
    if target.is_dir():
        root = target
        paths = sorted(p for p in root.rglob("*") if p.is_file() and _is_log(p))
    elif target.is_file():
        root, paths = target.parent, [target]
    else:
        matches = sorted(Path(p) for p in glob.glob(str(target), recursive=True))
        paths = [p for p in matches if p.is_file() and _is_log(p)]
        if not matches:
            raise InvalidInput(f"no such directory, file or glob match: {spec}", code="archive_not_found",
                               detail={"archive": spec})
        root = Path(os.path.commonpath([str(p.parent) for p in paths])) if paths else target.parent
    per_dir: dict[Path, int] = {}
    for p in paths:
        per_dir[p.parent] = per_dir.get(p.parent, 0) + 1
    out = []
    for p in paths:
        try:
            size = p.stat().st_size
        except OSError:
            size = 0  # vanished or unreadable: the item fails later and says why
        out.append(ArchiveFile(str(p.resolve()), size, _external_id(p, root), _label_of(p, per_dir[p.parent] == 1)))
    return out


_GLOB_CHARS = set("*?[")


def discover_under(spec: str, root: Path | None) -> list[ArchiveFile]:
    """`discover`, for a request from the API: only below `root` (none: refused), so that an API
    call cannot make the server read arbitrary files."""
    if root is None:
        raise InvalidInput("importing an archive through the API needs LOGDX_RELABEL_ARCHIVE_ROOT on the server; "
                           "use `logdx relabel --archive` otherwise", code="archive_import_disabled")
    root = root.resolve()
    target = Path(spec) if Path(spec).is_absolute() else root / spec
    fixed = Path(*[part for part in (target.parts[:next((i for i, p in enumerate(target.parts)
                                                          if _GLOB_CHARS & set(p)), len(target.parts))])])
    if not fixed.resolve().is_relative_to(root):
        raise InvalidInput(f"{spec} is not under the archive root", code="archive_outside_root",
                           detail={"archive": spec})
    files = discover(str(target))
    outside = [f.path for f in files if not Path(f.path).is_relative_to(root)]
    if outside:
        raise InvalidInput(f"{outside[0]} is not under the archive root (a link?)", code="archive_outside_root",
                           detail={"archive": spec})
    return files


@dataclass(frozen=True)
class ImportedBlob:
    sha256: str
    size: int
    encoding: str
    error: str | None
    warnings: list[str]
    path: Path  # where the blob now lives


def import_file(src: str, store: BlobStore) -> ImportedBlob:
    """Copy `src` into the content-addressed store, hashing and decode-checking it on the way;
    memory stays at one piece. Raises OSError when the file cannot be read."""
    check = StreamCheck(validate=True)
    spool = store.new_spool()
    try:
        with open(src, "rb") as fin, open(spool, "wb") as fout:
            while piece := fin.read(COPY_PIECE):
                check.feed(piece)
                fout.write(piece)
            check.finish()
            fout.flush()
            os.fsync(fout.fileno())
        dest = store.commit_spool(spool, check.sha256)
    except BaseException:
        spool.unlink(missing_ok=True)
        raise
    return ImportedBlob(check.sha256, check.size, check.encoding.value, check.error, list(check.warnings), dest)
