"""`regex` patterns built from cached compile arguments.

`regex.compile` parses and optimises a pattern in Python: 0.3-0.6 ms for a rule pattern. Every
process that scans a log compiles the rule patterns it uses afresh (each range worker, each CLI
run), and an error burst uses a few dozen. What the parser produces is plain data, the arguments
of the `_regex` C constructor; captured once, when the rules cache is built, and kept with each
rule's pattern, it gives a later process the same Pattern object in one C call (~20 us).

The arguments belong to one `regex` version (they are the compiled program), so they carry it:
another version, or anything unexpected, falls back to `regex.compile`.
"""

from __future__ import annotations

import atexit
import os
import pickle
import threading
from pathlib import Path

import regex

try:  # the module whose `_compile` calls the C constructor (`regex.regex` in older releases)
    from regex import _main
except ImportError:  # pragma: no cover - another layout: everything compiles as usual
    _main = None

VERSION = regex.__version__
_capture_lock = threading.Lock()

CompileArgs = tuple[str, tuple]  # (regex version, the C constructor's arguments)


class _Recorder:
    """Stands in for `_main._regex` while one pattern compiles: records what `compile` gets."""

    def __init__(self, real) -> None:
        self._real = real
        self.calls: list[tuple] = []

    def compile(self, *args):
        self.calls.append(args)
        return self._real.compile(*args)

    def __getattr__(self, name: str):
        return getattr(self._real, name)


def compile_with_args(pattern: str, flags: int = 0) -> tuple[regex.Pattern, CompileArgs | None]:
    """Compile like `regex.compile` (raising regex.error alike) and return the arguments a later
    process can build the same pattern from (None when they could not be captured)."""
    if _main is None or not hasattr(_main, "_compile"):
        return regex.compile(pattern, flags), None
    with _capture_lock:  # (one swap of the module attribute at a time)
        real = _main._regex
        recorder = _Recorder(real)
        _main._regex = recorder
        try:
            compiled = _main._compile(pattern, flags, False, {}, False)
        finally:
            _main._regex = real
    args = next((a for a in recorder.calls if a and a[0] == pattern), None)
    return compiled, ((VERSION, args) if args is not None and _same(compiled, args) else None)


def _same(compiled: regex.Pattern, args: tuple) -> bool:
    """The arguments rebuild this very pattern (its text, flags and groups)."""
    try:
        again = _main._regex.compile(*args)
    except Exception:  # (the constructor changed shape): not cacheable
        return False
    return (again.pattern, again.flags, again.groupindex) == (compiled.pattern, compiled.flags, compiled.groupindex)


def build(cached: CompileArgs | None, pattern: str, flags: int) -> regex.Pattern:
    """The pattern from cached arguments of this `regex` version, else compiled."""
    if cached is not None and cached[0] == VERSION and _main is not None:
        try:
            return _main._regex.compile(*cached[1])
        except Exception:  # a torn or foreign cache entry: compiled below
            pass
    return regex.compile(pattern, flags)


# ---- module-level patterns ---------------------------------------------------------------------
# The core modules compile ~30 patterns at import (~11 ms of every CLI start). Their compile
# arguments are kept in one small file next to the rules cache, read at the first `compile` of a
# process and written back at exit when a pattern was new (the code changed, or a first run).

MAX_ENTRIES = 2_000  # past this many (patterns of many code versions), the file starts afresh
_known: dict[tuple[str, int], CompileArgs] | None = None
_dirty = False


def cache_dir() -> Path | None:
    """Where logdx caches compiled forms: $LOGDX_RULES_CACHE_DIR (`off`: nowhere), else
    $XDG_CACHE_HOME/logdx/rules, else ~/.cache/logdx/rules."""
    configured = os.environ.get("LOGDX_RULES_CACHE_DIR")
    if configured:
        return None if configured.lower() == "off" else Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "logdx" / "rules"


def _file() -> Path | None:
    directory = cache_dir()
    return None if directory is None else directory / f"regex-{VERSION}.pickle"


def _load() -> dict[tuple[str, int], CompileArgs]:
    path = _file()
    if path is not None:
        try:
            with open(path, "rb") as fh:
                known = pickle.load(fh)
            if isinstance(known, dict):
                return known
        except Exception:  # missing, torn or foreign: rebuilt as patterns compile
            pass
    return {}


def compile(pattern: str, flags: int = 0) -> regex.Pattern:  # noqa: A001 - regex.compile's twin
    """`regex.compile` for patterns a module compiles at import, from cached arguments when it can."""
    global _known, _dirty
    if _known is None:
        _known = _load()
        atexit.register(_save)
    key = (pattern, int(flags))
    cached = _known.get(key)
    if cached is not None:
        return build(cached, pattern, flags)
    compiled, args = compile_with_args(pattern, flags)
    if args is not None:
        if len(_known) >= MAX_ENTRIES:
            _known.clear()
        _known[key] = args
        _dirty = True
    return compiled


def write_pickle(path: Path, value, prefix: str) -> bool:
    """Pickle `value` to `path` atomically (a concurrent reader sees the old file or the new one);
    False when it cannot be written (a read-only home: the cache is only an accelerator)."""
    import tempfile

    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=prefix)
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(value, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
        return True
    except OSError:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        return False


def _save() -> None:
    """Write the patterns back when one was new."""
    global _dirty
    path = _file()
    if not _dirty or path is None or _known is None:
        return
    _dirty = False
    write_pickle(path, _known, ".regex-")
