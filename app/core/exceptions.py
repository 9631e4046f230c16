"""Exception structure: Python tracebacks parsed into typed, chained, role-labelled records.

A traceback in a log is more than its last line. Which exception was raised *because of* which
(`The above exception was the direct cause of the following exception:`), which one a handler
hit while handling another (`During handling of the above exception, another exception
occurred:`), which one a launcher re-raised for a child (torchrun's `ChildFailedError`,
accelerate's `subprocess.CalledProcessError` of the worker command), and which one the
interpreter printed and ignored (`Exception ignored in: <function X.__del__>`, an `atexit`
callback, interpreter shutdown) decides whether it is the failure at all.

`parse_tracebacks` reads an ordered list of (line number, text): the lines the compressor kept
(templates' first and last lines, context around error lines, rule occurrences), or a whole log
in tests. Launcher prefixes (`[rank3]:`, `[default3]:`, `10.0.0.1: `, `node-3: `, mpirun's
`[1,4]<stderr>:`, Ray's `(RayTrainWorker pid=1, ip=10.0.0.2) `, an ISO timestamp) are
stripped, and each distinct prefix is its own stream, so interleaved tracebacks of several ranks
stay apart. A repeat of the same exception line on another rank, whose traceback frames were
folded into the first one's templates, takes the structure of the first.

Each record's class (with its module) is looked up in the exception table (`rules/exceptions.yaml`,
`kind: exceptions`): a class name (bare or qualified), optionally narrowed by the module family
and a message pattern (an OSError with errno 28 is a full disk), else a base-name pattern within a
known package family (`botocore.*Timeout*`), else a generic type. `apply_exceptions` then feeds
the records into the diagnosis (`app/core/pipeline.py`): a generic Python rule's event on an
exception line is re-typed by the table; an exception printed at teardown, ignored by the
interpreter, after a completion marker or followed by sustained training is `recovered`; a
launcher's re-raise and the outer exceptions of a chain are wrappers. Only kept lines are read: no
work per metric line. Switched off with `LOGDX_ABLATE=exceptions`.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field, replace

import regex

from app.core import ablation, regexcache
from app.core.fields import fold_key
from app.core.types import ActionKind, Category, ErrorType, Role, default_category

# ---- line shapes ------------------------------------------------------------------------------

# launcher prefixes, repeatable (`10.0.0.1: [rank3]: `): host label, srun task id, torchrun tags,
# mpirun --tag-output, Ray's relay prefix, an ISO timestamp from a log collector, the markdown a
# thread wraps a pasted log in (`> `, `**`, a backtick), and the name and level a Python logging
# formatter puts after the time when a program re-logs its children's stderr line by line
# (`2025-10-31 03:11:02,478 - trainer - ERROR - `, the logging cookbook's format)
_PREFIX_RE = regexcache.compile(
    r"(?:\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\s?(?:\|\s?)?"
    r"|-\s[\w.-]+\s-\s(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s-\s"
    r"|\[(?:rank|Rank|RANK)\s?\d+\]:\s?|\[default\d+\]:\s?|\[\d+,\d+\]<std(?:out|err|diag)>:\s?"
    r"|\((?:[\w.-]+ )?pid=\d+(?:, ip=[\d.]+)?\)\s"
    r"|(?:\d{1,3}(?:\.\d{1,3}){3}|[a-z][a-z0-9_-]*\d[a-z0-9_.-]*|[a-z][a-z0-9_]*-[a-z0-9_.-]+|\d{1,5}):\s"
    r"|>\s?|[*`]{1,3}(?=[A-Za-z_\s]))")
_HEADER = "Traceback (most recent call last):"
# (a path a poster redacted may have lost its opening quote: `File <path_to_pkg>/gopen.py", line 121`)
_FRAME_RE = regexcache.compile(r'^\s+File "?(?P<path>[^"\n]*)", line \d+, in (?P<func>\S+)')
# a frame's source line that raises a class by name: `    raise FileNotFoundError(f"Dict not found: {p}")`
_RAISE_RE = regexcache.compile(r'^\s+raise (?P<cls>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure|Timeout))'
                               r'\((?:[rbfu]?(?P<q>["\'])(?P<msg>[^"\'\n]*)(?P=q))?')
_CAUSE_SEP = "The above exception was the direct cause of the following exception"
_CONTEXT_SEP = "During handling of the above exception, another exception occurred"
# the final line of a traceback: `module.Class: message`, `module.Class`, Ray's
# `ray.exceptions.RayTaskError(ValueError): ...`, TensorFlow 1's OpError that repeats its class
# after the op's creation stack (errors_impl.py: `ResourceExhaustedError (see above for
# traceback): OOM when allocating tensor ...`)
_SEE_ABOVE = " (see above for traceback): "
# TensorFlow 1's training Coordinator logs the exception that stops the training, class and
# message, through its logger (training/coordinator.py request_stop: `Error reported to
# Coordinator: <class 'tensorflow.python.framework.errors_impl.DataLossError'>, truncated record
# at 72435675`), whatever prefix the logger adds
_COORDINATOR_RE = regexcache.compile(
    r"\bError reported to Coordinator: <(?:class|type) '(?P<cls>[A-Za-z_][\w.]*)'>, (?P<msg>.*)$")
_EXC_LINE_RE = regexcache.compile(
    r"^(?P<qual>(?:[A-Za-z_]\w*\.)*(?P<name>[A-Za-z_]\w*))(?:\((?P<inner>[\w.]+)\)| \(see above for traceback\))?"
    r"(?::(?:\s(?P<msg>.*))?|\s*)$")
# without a traceback around it, a line is an exception only when its class reads as one
_EXC_NAME_RE = regexcache.compile(
    r"^[A-Z]\w*(?:Error|Exception|Interrupt|Exit|Failure|Failed|Invalid|Timeout)$|^Exception$"
    r"|^(?:KeyboardInterrupt|StopIteration|GeneratorExit|HeaderTooLarge)$")
# ... or when a library's errors / exceptions module defines it, whatever its name says
# (`triton.runtime.errors.OutOfResources`, `google.api_core.exceptions.TooManyRequests`)
_EXC_MODULE_RE = regexcache.compile(r"(?:^|\.)(?:errors|exceptions)\.[A-Z][a-z]\w*$")
# teardown: the interpreter says it ignored the exception, or the frames say where it ran
_IGNORED_RE = regexcache.compile(
    r"^Exception ignored (?:in|on|while)\b|^Error in atexit\._run_exitfuncs|^Exception in thread .*"
    r"interpreter shutdown|^Error in sys\.excepthook")
# a traceback a logger printed (`log.warning(msg, exc_info=True)`) under a message that says the
# program handled it: it retries, skips or falls back
_HANDLED_RE = regexcache.compile(
    # it names what failed (DeepSpeed's `OVERFLOW! ... Skipping step`, a client's bare
    # `Retrying in 1s [Retry 1/5].` after the previous error are not captions)
    r"(?i)(?=.*\b(?:fail(?:ed|ure|s)?|error|exception|corrupt|could not|unable to|cannot)\b)"
    r".*(?:\bretrying\b|\bwill retry\b|\bretry in \d|\battempt \d+\s*(?:/|of)\s*\d+"
    r"|\bskipping\b|\bignoring\b|\bfalling back\b|\bcontinuing (?:with|without|anyway)\b)")
# an uncaught exception of a thread other than the main one: printed, and the process goes on
_THREAD_RE = regexcache.compile(r"^Exception in thread \S")
# (multiprocessing's finalizers run when a process (a DataLoader worker, a pool) exits:
# `util._run_finalizers` -> `_remove_temp_dir` removing its /tmp/pymp-* directory; weakref.finalize
# runs its pending finalizers from an atexit hook, `weakref._exitfunc`, as tempfile's
# TemporaryDirectory cleanup at exit does)
TEARDOWN_FUNCS = frozenset({"__del__", "_run_exitfuncs", "_exit_function", "_python_exit", "_shutdown",
                             "_atexit", "atexit_callback", "_run_finalizers", "_remove_temp_dir",
                             "_exitfunc"})
_SHUTDOWN_MSG_RE = regexcache.compile(
    r"(?i)python is likely shutting down|interpreter shutdown|sys\.meta_path is None")
# an error line (no traceback) that says the process is exiting: the CUDA runtime unloading
# (cudaErrorCudartUnloading, "driver shutting down") or the interpreter shutting down
_SHUTDOWN_LINE_RE = regexcache.compile(
    r"(?i)driver shutting down|cudaErrorCudartUnloading|python is likely shutting down|during interpreter shutdown")
# a multiprocessing queue's feeder thread (`queues.py`, `_feed`) prints what it could not send and
# goes on (`Queue._on_queue_feeder_error`); a broken pipe there is the reading process having
# exited (the end of a run, or a consumer that failed with its own error), not a failure of its
# own. (Its other errors, a full /dev/shm or too many open files, lose the item: failures.)
_FEEDER_FRAME_RE = regexcache.compile(r"multiprocessing/queues\.py:_feed$")
_EPIPE_RE = regexcache.compile(r"^BrokenPipeError\b|\[Errno 32\]|\bEPIPE\b")
# a launcher re-raising a child's failure: its frames, or its command in the message
_LAUNCHER_FRAME_RE = regexcache.compile(
    r"(?:accelerate/commands/launch\.py|accelerate/commands/accelerate_cli\.py|deepspeed/launcher/"
    r"|torch/distributed/run\.py|torch/distributed/launch\.py|torch/distributed/launcher/api\.py"
    r"|torch/distributed/elastic/multiprocessing/errors/__init__\.py)$")
_LAUNCHER_CMD_RE = regexcache.compile(
    r"Command '\['[^']*\b(?:python[\d.]*|torchrun|deepspeed|accelerate|pdsh|mpirun|srun)'")
MAX_GAP = 400  # lines: a traceback's frames and its final line are this close in the original log


@dataclass
class ExceptionRecord:
    """One exception a traceback (or a bare `Class: message` line) printed."""

    line: int
    text: str  # the line as printed
    start: int  # the traceback's first line (its header, or the "Exception ignored in" notice)
    stream: str  # its launcher prefix: tracebacks of different ranks stay apart
    qualname: str  # `torch.distributed.DistBackendError`
    module: str  # `torch.distributed` ("" for builtins)
    name: str  # `DistBackendError`
    message: str
    inner: str | None = None  # Ray's `RayTaskError(ValueError)`: the task's own class
    in_traceback: bool = False  # frames or a header came before it in its stream
    frames: list[str] = field(default_factory=list)  # `path:function` of the frames seen
    chain: str | None = None  # "cause" / "context": raised because of / while handling `chained_from`
    chained_from: int | None = None  # index of the inner record
    wraps_next: bool = False  # a later exception names this one as its cause / context
    launcher: bool = False  # a launcher's re-raise of a child's failure
    teardown: str | None = None  # why it is harmless: "ignored", "__del__", "atexit", "shutdown", ...
    thread: bool = False  # raised in a thread other than the main one ("Exception in thread X:")
    handled: bool = False  # printed by a logger under a message saying it retries / skips / falls back

    @property
    def key(self) -> str:
        return fold_key(f"{self.qualname}: {self.message}")


@dataclass
class _Stream:
    last: int = -10**9  # line of the last traceback line seen
    start: int | None = None  # line of the open traceback's header / ignored notice
    open: bool = False
    frames: list[str] = field(default_factory=list)
    ignored: str | None = None
    ignored_line: int = -10**9
    pending: str | None = None  # chain separator seen, waiting for the next exception
    thread_line: int = -10**9  # line of an "Exception in thread" notice
    handled: bool = False  # the open traceback's caption says the program handled it
    last_exc: int | None = None  # index of the last record of this stream
    raised: tuple[int, str, str, str] | None = None  # (line, text, class, message) of a `raise X(...)` source line


def strip_prefix(text: str) -> tuple[str, str]:
    """(prefix, body): the launcher prefixes at the line's start (repeated: `10.0.0.1: [rank3]: `)
    and the program's own text."""
    end = 0
    for _ in range(4):
        m = _PREFIX_RE.match(text, end)
        if m is None or m.end() == end:
            break
        end = m.end()
    # a prefix ending in `: ` swallows nothing of a traceback's indentation: `[rank3]:   File`
    return text[:end].strip(), text[end:]


_STAMP_RE = regexcache.compile(r"\s?\d{4}-\d\d-\d\d[T ][\d:.,]+(?:Z|[+-]\d\d:?\d\d)?\s?\|?\s?")


def _stream_key(prefix: str) -> str:
    # the timestamp is not a stream, nor a thread's quote and emphasis marks; the rank/host tags are
    if prefix[:1] in (">", "*", "`"):
        prefix = prefix.replace(">", "").replace("*", "").replace("`", "").strip()
    if "-" not in prefix:
        return prefix
    return _STAMP_RE.sub("", prefix).strip()


def parse_exception_line(body: str, *, strict: bool = True) -> tuple[str, str, str, str, str | None] | None:
    """(qualname, module, name, message, inner) of an exception's final line, or None. `strict`:
    the class must read as an exception by its name (no traceback around the line to say so)."""
    if not body or body[0] in " \t" or len(body) > 4000:
        return None
    if (cm := _COORDINATOR_RE.search(body)) is not None:
        body = f"{cm.group('cls')}: {cm.group('msg')}"
    m = _EXC_LINE_RE.match(body.rstrip("\r"))
    if m is None:
        return None
    qual, name = m.group("qual"), m.group("name")
    if m.group("msg") is None and ":" not in body and "." not in qual and not _EXC_NAME_RE.match(name):
        return None  # a bare word on its own line is not an exception without a known class name
    if not name.lstrip("_")[:1].isupper() and name not in ("error", "timeout", "gaierror", "herror"):
        return None
    if (strict or name.isupper()) and not _EXC_NAME_RE.match(name.lstrip("_")) \
            and not (strict and _EXC_MODULE_RE.search(qual)):
        return None  # (`INFO: ...` interleaved into a traceback is not its exception)
    if qual in ("Note", "Warning", "Hint", "Usage", "Traceback", "Exception ignored in"):
        return None
    module = qual[: -len(name) - 1] if "." in qual else ""
    return qual, module, name, (m.group("msg") or "").strip(), m.group("inner")


# a line that may start, continue or end a traceback (the rest is skipped unread)
_RELEVANT = regexcache.compile(
    r'Traceback|File "|exception|rror|xception|nterrupt|Exit|Fail|Invalid|imeout|Warning|TooLarge|StopIteration'
    r'|Unavailable|Exceeded|Disconnected|Incomplete')


def _caption_handled(lines: list[tuple[int, str]], i: int, prefix: str) -> bool:
    """The line right above a traceback header, from the same stream, is a logger's message that
    says the program handled the exception (it retries, skips or falls back)."""
    if i == 0 or lines[i - 1][0] != lines[i][0] - 1:
        return False
    before_prefix, before = strip_prefix(lines[i - 1][1])
    return _stream_key(before_prefix) == _stream_key(prefix) and bool(_HANDLED_RE.search(before))


def parse_tracebacks(lines: list[tuple[int, str]], anchors: set[int] | None = None) -> list[ExceptionRecord]:
    """Every exception the lines print, with its chain links and teardown/launcher marks; `lines`
    in line order (gaps allowed: what the compressor kept). `anchors`: the lines that may start
    a traceback or be a lone exception (the error-looking ones); others are read only within
    MAX_GAP lines after a traceback's header or frame (None: every line may)."""
    records: list[ExceptionRecord] = []
    streams: dict[str, _Stream] = {}
    seen: dict[str, ExceptionRecord] = {}  # first structured record per exception text (repeats)
    active_until = -1  # lines up to here may belong to a traceback seen: each is read in full
    for i, (line_no, text) in enumerate(lines):
        if not text:
            continue
        # most kept lines are neither part of a traceback nor an exception: one C-level search
        if line_no > active_until and (line_no not in anchors if anchors is not None else not _RELEVANT.search(text)):
            continue
        prefix, body = strip_prefix(text)
        st = streams.setdefault(_stream_key(prefix), _Stream())
        if line_no - st.last > MAX_GAP:  # a traceback does not span this far: state is stale
            st.open, st.frames, st.pending, st.last_exc = False, [], None, None
        stripped = body.strip()
        if stripped.startswith(_HEADER):
            if not (st.ignored and line_no - st.ignored_line <= 2):
                st.start = line_no
            st.handled = _caption_handled(lines, i, prefix)
            st.open, st.frames, st.last = True, [], line_no
            active_until = line_no + MAX_GAP
            continue
        if body.startswith(" ") and (fm := _FRAME_RE.match(body)):
            st.frames.append(f"{fm.group('path')}:{fm.group('func')}")
            st.open, st.last = True, line_no
            active_until = line_no + MAX_GAP
            continue
        if _CAUSE_SEP in stripped or _CONTEXT_SEP in stripped:
            st.pending = "cause" if _CAUSE_SEP in stripped else "context"
            st.last = line_no
            continue
        if _THREAD_RE.match(stripped) and not _IGNORED_RE.match(stripped):
            st.thread_line = st.last = st.start = line_no
            continue
        if _IGNORED_RE.match(stripped):
            st.ignored = "atexit" if "atexit" in stripped else (
                "shutdown" if "shutdown" in stripped else ("__del__" if "__del__" in stripped else "ignored"))
            st.ignored_line = st.last = st.start = line_no
            continue
        if body[:1] in (" ", "\t"):
            if st.open:
                st.last = line_no  # source line / caret markers of a frame
                rm = _RAISE_RE.match(body)
                st.raised = (line_no, text, rm.group("cls"), rm.group("msg") or "") if rm else None
            continue
        parsed = parse_exception_line(body, strict=not st.open)
        if parsed is None:
            continue
        if st.open and line_no - st.last > 2 and "." not in parsed[0] and not _EXC_NAME_RE.match(parsed[2]):
            continue  # far from the traceback's last kept line, a `Word: text` line is not its exception
        qual, module, name, msg, inner = parsed
        start = st.start if (st.open and st.start is not None) else line_no
        rec = ExceptionRecord(line=line_no, text=text, start=start, stream=_stream_key(prefix), qualname=qual, module=module,
                              name=name, message=msg, inner=inner,
                              # (Ray's `RayTaskError(Inner): ray::f() (pid=..)` is a traceback's
                              # caption by its form: Ray prints it above the task's frames)
                              in_traceback=st.open or _SEE_ABOVE in body or bool(_COORDINATOR_RE.search(body))
                              or (inner is not None and msg.startswith("ray::")),
                              frames=list(st.frames),
                              thread=line_no - st.thread_line <= MAX_GAP and st.thread_line >= st.ignored_line,
                              handled=st.open and st.handled)
        if st.pending and st.last_exc is not None:
            rec.chain, rec.chained_from = st.pending, st.last_exc
            records[st.last_exc].wraps_next = True
        if st.ignored and line_no - st.ignored_line <= MAX_GAP:
            rec.teardown = st.ignored
        elif any(f.rsplit(":", 1)[-1] in TEARDOWN_FUNCS or "atexit" in f for f in rec.frames):
            rec.teardown = next(f.rsplit(":", 1)[-1] for f in rec.frames
                                if f.rsplit(":", 1)[-1] in TEARDOWN_FUNCS or "atexit" in f)
        elif _SHUTDOWN_MSG_RE.search(msg):
            rec.teardown = "shutdown"
        elif rec.frames and _FEEDER_FRAME_RE.search(rec.frames[0]) and _EPIPE_RE.search(f"{name}: {msg}"):
            rec.teardown = "the queue's reader had exited"
        elif name == "SystemExit" and msg.strip() in ("", "0", "None"):
            rec.teardown = "exit status 0"  # sys.exit(0), Ray's exit_actor(): a clean exit
        elif rec.chained_from is not None and records[rec.chained_from].teardown:
            rec.teardown = records[rec.chained_from].teardown  # raised while handling a teardown one
        rec.launcher = (any(_LAUNCHER_FRAME_RE.search(f.rsplit(":", 1)[0]) for f in rec.frames[-3:])
                        or (name == "CalledProcessError" and bool(_LAUNCHER_CMD_RE.search(msg)))
                        or name == "ChildFailedError")
        structured = rec.in_traceback or rec.teardown is not None or rec.chain is not None
        if not structured and (first := seen.get(rec.key)) is not None:
            # the same exception on another rank: its frames folded into the first one's lines
            rec.in_traceback, rec.teardown, rec.launcher = first.in_traceback, first.teardown, first.launcher
            rec.frames = first.frames
        elif structured:
            seen.setdefault(rec.key, rec)
        records.append(rec)
        st.open, st.frames, st.pending, st.start, st.thread_line, st.handled = False, [], None, None, -10**9, False
        st.raised = None
        if rec.teardown:
            st.ignored = None
        st.last_exc, st.last = len(records) - 1, line_no
    # a traceback cut after its last frame (a post trimmed there, a process killed mid-print):
    # when that frame's source line raises a class by name, that is the exception it printed
    for key, st in streams.items():
        if st.open and st.raised is not None and st.raised[0] == st.last and st.frames:
            line_no, text, qual, msg = st.raised
            module, _, name = qual.rpartition(".")
            records.append(ExceptionRecord(
                line=line_no, text=text, start=st.start if st.start is not None else line_no, stream=key,
                qualname=qual, module=module, name=name, message=msg, in_traceback=True, frames=list(st.frames),
                handled=st.handled))  # (after the others: `chained_from` indexes stay valid)
    return records


# ---- the table ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableMatch:
    """What the table says about one exception."""

    entry_id: str
    error_type: ErrorType
    category: Category
    role: Role
    priority: int
    action: ActionKind | None
    hint: str | None
    specific: bool  # a class (or class + message) entry, not a package family or the fallback


# the standard library's transport modules: a client's traceback runs through them, and so does
# the job's own (its connection to the rendezvous master), so their frames say nothing of who used
# the network (a traceback cut inside them is still read by them, subsystems.py)
_TRANSPORT_FRAME_RE = regexcache.compile(r"[/\\]python3?[\d.]*[/\\](?:ssl|socket|selectors)\.py$")


def _client_side(m: TableMatch, rec: ExceptionRecord, vocabulary) -> TableMatch:
    """A network error the traceback shows raised inside a client library's own frames is that
    client's failure: under an HTTP client's (`OSError: [Errno 101] Network is unreachable` from
    urllib3's create_connection) a request to an external service (a hub, a data or metrics
    endpoint) that failed, ConnectionError, not the cluster's network between the ranks; under an
    object-store client's (botocore above urllib3), the store's. The clients and what each types
    are the subsystem vocabulary's `frames` entries (rules/subsystems.yaml), the ones a cut
    traceback is read by; the exception table's class and message reading stays for the rest."""
    if m.error_type is not ErrorType.NetworkError or not rec.frames:
        return m
    paths = (f.rsplit(":", 1)[0] for f in rec.frames)
    found = vocabulary.type_frames(p for p in paths if not _TRANSPORT_FRAME_RE.search(p))
    if found is None:
        return m
    best = found[1]
    etype = ErrorType(best.error_type)
    return replace(m, error_type=etype, category=default_category(etype),
                   entry_id=f"{m.entry_id}:{best.id}", action=None)


# a data pipeline library's own frames (installed packages: a project's `data/datasets/` module is
# not one): a generic value/index/type error raised inside one is a record or shard the
# library could not read (a malformed tar shard, a record of the wrong shape), the data's fault
_DATA_LIBRARY_FRAME_RE = regexcache.compile(
    r"(?:site|dist)-packages[/\\](?:webdataset|datasets|pyarrow|streaming|torchdata|tensorflow_datasets|litdata"
    r"|lance|petastorm|nvidia[/\\]dali)[/\\]")
# (not KeyError: a column the code asks for and the dataset lacks is as often the code's)
_DATA_GENERIC = frozenset({ErrorType.ValueError, ErrorType.IndexError, ErrorType.TypeError})


def _data_side(m: TableMatch, rec: ExceptionRecord) -> TableMatch:
    """A generic value/index/type error whose innermost frame is in a data pipeline library
    is a record the library could not read (DatasetLoadingError)."""
    if m.error_type not in _DATA_GENERIC or not rec.frames:
        return m
    if not _DATA_LIBRARY_FRAME_RE.search(rec.frames[-1].rsplit(":", 1)[0]):
        return m
    return replace(m, error_type=ErrorType.DatasetLoadingError,
                   category=default_category(ErrorType.DatasetLoadingError), entry_id=m.entry_id + ":data-library",
                   action=None)


# the checkpoint loader's own frames (torch.load: torch/serialization.py's load, _load,
# _legacy_load, persistent_load, its zip reader's __init__): a generic error raised there (an
# EOFError "Ran out of input" from an empty or truncated file, a ValueError or RuntimeError of the
# unpickler) is a checkpoint the loader could not read. An OSError there is the file system's, an
# interrupt the person's: typed as they are.
_LOADER_FRAME_RE = regexcache.compile(r"(?:^|[/\\])torch[/\\]serialization\.py$")
_LOAD_GENERIC = frozenset({ErrorType.ValueError, ErrorType.RuntimeError})


def _load_side(m: TableMatch, rec: ExceptionRecord) -> TableMatch:
    """A generic exception (a class no entry names, a ValueError or RuntimeError) whose innermost
    frame is torch's serialization module, reached through its load and not its save (the zip
    reader's and writer's `__init__` look alike), is a checkpoint that could not be read
    (ModelLoadingError)."""
    if not (m is FALLBACK or m.error_type in _LOAD_GENERIC) or not rec.frames:
        return m
    if not _LOADER_FRAME_RE.search(rec.frames[-1].rpartition(":")[0]):
        return m
    funcs = [f.rpartition(":")[2] for f in rec.frames if _LOADER_FRAME_RE.search(f.rpartition(":")[0])]
    if not any("load" in f for f in funcs) or any("save" in f or "writer" in f for f in funcs):
        return m
    return TableMatch(f"{m.entry_id}:checkpoint-loader", ErrorType.ModelLoadingError,
                      default_category(ErrorType.ModelLoadingError), Role.CAUSE, max(m.priority, 40), None,
                      "The checkpoint loader (torch.load) could not read the file: empty, truncated by "
                      "an interrupted save or copy, or not a checkpoint. Restore or re-download it, or "
                      "resume from an earlier one.", True)


# generic classes that often wrap a more specific one (named in their message)
_GENERIC_WRAPPERS = frozenset({"exc.unknown-class", "exc.exc-runtime", "exc.exc-os"})
_INNER_REPR_RE = regexcache.compile(
    r"(?<![\w.])((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Timeout|Disconnected|Exceeded))\(")
FALLBACK = TableMatch("exc.unknown-class", ErrorType.Unknown, Category.UNKNOWN, Role.CAUSE, 30, None,
                      "An exception class no table entry names; read it with its traceback.", False)


# A KeyboardInterrupt (or the SIGTERM/SIGINT a launcher turns into one) whose innermost frame
# waits: the process was stopped while it waited for a lock, a queue, a child, a socket or a
# collective, which is what a person stopping a stuck job sees (threads post the trace to show
# where it hung). A hang the traceback shows, below any error of the log.
_WAIT_FUNCS = frozenset({
    "wait", "acquire", "_wait_for_tstate_lock", "join", "get", "put", "poll", "_poll", "select", "recv",
    "recv_bytes", "_recv_bytes", "_recv", "recv_into", "accept", "read", "readinto", "sleep",
    "barrier", "monitored_barrier", "all_reduce", "allreduce", "broadcast", "all_gather", "all_gather_into_tensor",
    "reduce_scatter_tensor", "all_to_all_single", "synchronize", "_try_get_data", "_get_data", "wait_stream",
    "result", "communicate", "_wait_for_workers", "_next_data"})
_INTERRUPTS = frozenset({"KeyboardInterrupt", "SignalException"})
INTERRUPTED_WHILE_WAITING = TableMatch(
    "exc.interrupted-while-waiting", ErrorType.Hang, Category.FRAMEWORK, Role.CAUSE, 26, None,
    "The process was interrupted while it waited (its traceback ends in a wait: a lock, a queue, a "
    "DataLoader worker, a socket or a collective); the job was stuck there. Read the other ranks' "
    "traces for the one that never arrived.", True)


_LOCK_MODULES = ("synchronize.py", "threading.py", "filelock/_api.py")  # a `with lock:` (multiprocessing, threading, filelock)


def interrupted_while_waiting(rec: ExceptionRecord) -> bool:
    if rec.name not in _INTERRUPTS or not rec.frames:
        return False
    path, _, func = rec.frames[-1].rpartition(":")
    return func in _WAIT_FUNCS or (func == "__enter__" and path.endswith(_LOCK_MODULES))


class ExceptionTable:
    """The compiled `rules/exceptions.yaml` entries, most specific first."""

    def __init__(self, specs: list) -> None:
        self.specs = list(specs)
        self._by_name: dict[str, list] = {}
        self._families: list = []
        for order, spec in enumerate(self.specs):
            if spec.classes:
                for cls in spec.classes:
                    self._by_name.setdefault(cls.rsplit(".", 1)[-1], []).append((order, spec))
            else:
                self._families.append((order, spec))
        self._msg = {spec.id: regexcache.compile(spec.message, regex.I) for spec in self.specs if spec.message}
        self._name = {spec.id: regexcache.compile(spec.name_pattern) for spec in self.specs if spec.name_pattern}

    def _module_ok(self, spec, module: str, qualname: str) -> bool:
        qualified = [c for c in spec.classes if "." in c]
        if qualified and not any(qualname == c or qualname.endswith("." + c) for c in qualified) \
                and not any(c.rsplit(".", 1)[-1] == qualname.rsplit(".", 1)[-1] and "." not in c for c in spec.classes):
            return False
        if spec.modules:
            module = module or "builtins"
            root = module.split(".", 1)[0]
            return any(root == m or module == m or module.startswith(m + ".") for m in spec.modules)
        return True

    def lookup(self, qualname: str, module: str, name: str, message: str, *, any_module: bool = False) -> TableMatch:
        """`any_module`: the class was printed without its module (a repr inside a message), so
        an entry restricted to module families may match it."""
        candidates = []
        for order, spec in self._by_name.get(name, ()):
            if not (any_module and "." not in qualname) and not self._module_ok(spec, module, qualname):
                continue
            if spec.message and not self._msg[spec.id].search(message):
                continue
            score = 8 + (4 if spec.message else 0) + (2 if spec.modules else 0) + (1 if "." in qualname else 0)
            candidates.append((-score, order, spec))
        if not candidates:
            for order, spec in self._families:
                if spec.modules and not self._module_ok(spec, module, qualname):
                    continue
                if spec.name_pattern and not self._name[spec.id].search(name):
                    continue
                if spec.message and not self._msg[spec.id].search(message):
                    continue
                if not (spec.modules or spec.name_pattern or spec.message):
                    continue
                score = (4 if spec.message else 0) + (2 if spec.name_pattern else 0) + (1 if spec.modules else 0)
                if spec.last_resort:  # below a package family (score 1) whatever it names
                    score -= 1.5
                candidates.append((-score, order, spec))
        if not candidates:
            return FALLBACK
        _, _, spec = min(candidates, key=lambda c: (c[0], c[1]))
        return TableMatch(
            entry_id=f"exc.{spec.id}", error_type=spec.error_type,
            category=spec.category or default_category(spec.error_type), role=spec.role,
            priority=spec.priority, action=spec.action, hint=spec.hint, specific=bool(spec.classes))

    def lookup_line(self, line: str) -> TableMatch | None:
        """The entry an exception's final line resolves to (None: not an exception line)."""
        _, body = strip_prefix(line)
        parsed = parse_exception_line(body, strict=False)
        if parsed is None:
            return None
        qual, module, name, msg, inner = parsed
        return self.resolve(qual, module, name, msg, inner)

    def resolve(self, qual: str, module: str, name: str, msg: str, inner: str | None) -> TableMatch:
        if inner:  # Ray's RayTaskError(ValueError): the task's own exception is the cause
            # (Ray writes the class's bare name, `RayTaskError(AcceleratorError)`: an entry kept to
            # its module family, torch's AcceleratorError, still names it)
            short = inner.rsplit(".", 1)[-1]
            found = self.lookup(inner, inner.rsplit(".", 1)[0] if "." in inner else "", short, msg,
                                any_module="." not in inner)
            if found is not FALLBACK:
                return found
        outer = self.lookup(qual, module, name, msg)
        if (outer.entry_id in _GENERIC_WRAPPERS or name == "Exception") and "(" in msg:
            # a generic wrapper whose message holds the repr of what it caught:
            # `RuntimeError: ... Got errors: [ClientError('...')]`, `OSError: ... (ReadTimeoutError(...))`
            for m in reversed(list(_INNER_REPR_RE.finditer(msg))):  # the innermost is printed last
                iq = m.group(1)
                imod, iname = (iq.rsplit(".", 1) if "." in iq else ("", iq))
                found = self.lookup(iq, imod, iname, msg[m.end():], any_module=not imod)
                if found is not FALLBACK and found.specific and found.role is Role.CAUSE:
                    return replace(found, entry_id=found.entry_id + ":in-message")
        return outer


def check_table_examples(table: ExceptionTable) -> list[tuple[str, str, bool]]:
    """(entry id, example, expected match) of every example the table gets wrong."""
    failures = []
    for spec in table.specs:
        for text in spec.examples.match:
            got = table.lookup_line(text)
            if got is None or got.entry_id != f"exc.{spec.id}":
                failures.append((spec.id, text, True))
        for text in spec.examples.no_match:
            got = table.lookup_line(text)
            if got is not None and got.entry_id == f"exc.{spec.id}":
                failures.append((spec.id, text, False))
    return failures


def table_of(ruleset) -> ExceptionTable:
    return ruleset.derived("exception_table", lambda: ExceptionTable(getattr(ruleset, "exceptions", [])))


# ---- into the diagnosis ------------------------------------------------------------------------


def kept_lines(log) -> tuple[list[tuple[int, str]], set[int]]:
    """The lines the compressor kept that a traceback can be read from, in order, and the
    *anchors* among them: lines flagged as error-looking (each template's first and last line),
    the context kept around them and every rule occurrence (a repeat folded into a template is
    there when a rule matched it). A traceback's header is flagged, so the plain lines after one
    (its frames) are added for MAX_GAP lines; other plain lines are never read (a log of 50,000
    distinct chatter lines costs one attribute test each)."""
    lines: dict[int, str] = dict(log.context)
    for o in log.occurrences:
        lines.setdefault(o.line, o.text)
    for t in log.templates:
        if t.flagged:
            lines[t.first_line] = t.text
            if t.last_line != t.first_line:
                lines[t.last_line] = t.last_line_text
    anchors = set(lines)
    starts = sorted(n for n, text in lines.items() if "Traceback" in text)
    if starts:
        # merged windows [header, header + MAX_GAP]; templates come in order of their first line
        windows: list[list[int]] = []
        for n in starts:
            if windows and n <= windows[-1][1]:
                windows[-1][1] = n + MAX_GAP
            else:
                windows.append([n, n + MAX_GAP])
        ends = [w[1] for w in windows]
        w, n_windows = 0, len(windows)
        for t in log.templates:
            first = t.first_line
            while w < n_windows and ends[w] < first:
                w += 1
            if t.flagged:
                continue
            if w < n_windows and windows[w][0] <= first:
                lines.setdefault(first, t.text)
            last = t.last_line
            if last != first:
                k = bisect_right(starts, last)
                if k and last - starts[k - 1] <= MAX_GAP:
                    lines.setdefault(last, t.last_line_text)
    return sorted(lines.items()), anchors


@dataclass
class OccClass:
    """How an exception line's occurrence enters the events (see events.events_from_log)."""

    tag: str
    error_type: ErrorType
    category: Category
    role: Role
    priority: int
    rule_id: str
    hint: str | None
    action: ActionKind | None
    recovered: bool
    chained: bool


_GENERIC_SOURCE = "python.yaml"
# what running out of memory or disk is typed as (the table's entries for a full disk's errno)
_EXHAUSTION = {ErrorType.HostOOMKilled, ErrorType.OutOfMemoryError}
_EXHAUSTION_ENTRIES = {"exc-os-disk-full"}


class ExceptionView:
    """The log's exception records and what they mean for its events."""

    def __init__(self, log, ruleset) -> None:
        from app.core.rank import recovered_before  # (rank imports events; events does not import this)
        from app.core.subsystems import vocabulary_of  # (subsystems imports this module)

        self.log = log
        self.table = table_of(ruleset)
        vocabulary = vocabulary_of(ruleset)
        self.kept, anchors = kept_lines(log)
        self.records = parse_tracebacks(self.kept, anchors)
        self.by_line = {r.line: r for r in self.records}
        self.matches = {
            r.line: _load_side(_data_side(_client_side(
                self.table.resolve(r.qualname, r.module, r.name, r.message, r.inner), r, vocabulary), r), r)
            for r in self.records}
        done = log.completed.line if log.completed is not None else None
        went_on = recovered_before(log)
        for r in self.records:  # (a wait the process was stopped in: not a teardown, not after the end)
            if not r.teardown and (done is None or r.line < done) and interrupted_while_waiting(r):
                self.matches[r.line] = INTERRUPTED_WHILE_WAITING
        self.harmless: dict[int, str] = {}
        # the tracebacks the interpreter printed and ignored: frames with no header of their own
        # that end in the same exception after one of them (two ignored tracebacks interleaved, the
        # second's notice and header went to the first) are the same teardown
        ignored = {r.key: (r.line, r.teardown) for r in reversed(self.records) if r.teardown}
        for r in self.records:
            if r.teardown:
                self.harmless[r.line] = f"teardown ({r.teardown})"
            elif r.key in ignored and r.in_traceback and r.start == r.line and ignored[r.key][0] < r.line \
                    and not r.launcher and r.chain is None:
                self.harmless[r.line] = f"teardown ({ignored[r.key][1]}, the same exception printed above)"
            elif r.handled:
                self.harmless[r.line] = "handled (its logger says it retries, skips or falls back)"
            elif done is not None and r.line > done and r.thread:
                # (the main thread's error after it is a failure: the final save or upload failed)
                self.harmless[r.line] = "a background thread's, after the completion marker"
            elif r.line < went_on:
                self.harmless[r.line] = "training went on after it"
        # not a traceback, but an error that says the process is exiting: NCCL's watchdog or a
        # CUDA call after the CUDA runtime began unloading (`CUDA error: driver shutting down`)
        for o in log.occurrences:
            if o.line not in self.by_line and _SHUTDOWN_LINE_RE.search(o.text):
                self.harmless[o.line] = "teardown (the process is shutting down)"
        # the exceptions raised while handling (or because of) an exhausted resource: a writer
        # that then fails to close its half-written file, a handler that re-raises it as its own
        self.after_exhaustion: set[int] = set()
        if ablation.enabled("exceptions"):
            for r in self.records:
                inner = r.chained_from
                while inner is not None:
                    m = self.matches[self.records[inner].line]
                    if m.error_type in _EXHAUSTION or m.entry_id in _EXHAUSTION_ENTRIES:
                        self.after_exhaustion.add(r.line)
                        break
                    inner = self.records[inner].chained_from
        self._covered: set[int] = set()

    def _role(self, line: int, role: Role) -> Role:
        """A cause raised while memory or disk ran out (or because of it) is its consequence."""
        return Role.SYMPTOM if role is Role.CAUSE and line in self.after_exhaustion else role

    def classify(self, occ, etype: ErrorType, category: Category) -> OccClass | None:
        """How an occurrence (read by its rule as `etype`/`category`) enters the events; None:
        as the rule reads it."""
        rec = self.by_line.get(occ.line)
        if rec is None:
            if occ.line not in self.harmless:
                return None
            return OccClass(tag="harmless", error_type=etype, category=category, role=occ.rule.spec.role,
                            priority=occ.rule.priority, rule_id=occ.rule.id, hint=occ.rule.spec.hint,
                            action=occ.rule.spec.action, recovered=True, chained=False)
        self._covered.add(occ.line)
        m = self.matches[occ.line]
        spec = occ.rule.spec
        generic = occ.rule.source.endswith(_GENERIC_SOURCE) and occ.rule.priority <= 50 \
            and occ.rule.id.startswith("py-")
        harmless = occ.line in self.harmless
        chained = rec.chain is not None
        if generic and m is not FALLBACK and (m.error_type is not etype or m.role is not spec.role
                                              or rec.launcher):
            if rec.launcher and m.role is Role.CAUSE:
                m = replace(m, error_type=ErrorType.ChildFailedError, category=Category.FRAMEWORK,
                            role=Role.SYMPTOM, entry_id="exc.launcher-reraise")
            return OccClass(tag=m.entry_id + (":harmless" if harmless else ""), error_type=m.error_type,
                            category=m.category, role=self._role(occ.line, m.role), priority=m.priority,
                            rule_id=m.entry_id, hint=m.hint, action=m.action, recovered=harmless, chained=chained)
        if not harmless and spec.role is Role.CAUSE and occ.line in self.after_exhaustion:
            # (memory or disk ran out first; what failed while that was handled is its consequence)
            return OccClass(tag="after-exhaustion", error_type=etype, category=category, role=Role.SYMPTOM,
                            priority=occ.rule.priority, rule_id=occ.rule.id, hint=spec.hint, action=spec.action,
                            recovered=False, chained=True)
        if not harmless:
            return None  # the rule's own reading stands (the compressor marks chained ones itself)
        return OccClass(tag="harmless", error_type=etype, category=category, role=spec.role, priority=occ.rule.priority,
                        rule_id=occ.rule.id, hint=spec.hint, action=spec.action, recovered=harmless,
                        chained=chained)

    def harmless_lines(self) -> frozenset[int]:
        """The lines of harmless tracebacks (notice, header and frames as kept, and the exception
        line): not "error-looking lines" of a log with no failure."""
        spans = [(r.start, r.line) for r in self.records if r.line in self.harmless]
        spans += [(n, n) for n in self.harmless if n not in self.by_line]
        if not spans:
            return frozenset()
        lines = [line for line, _ in self.kept]
        out: set[int] = set()
        for a, b in spans:
            out.update(lines[bisect_left(lines, a):bisect_right(lines, b)])
        return frozenset(out)

    def extra_events(self) -> list:
        """Events for exception lines no rule matched (a class without an `Error` suffix:
        `pyarrow.lib.ArrowInvalid`), typed by the table; one per entry and harmlessness. A line
        outside a traceback counts when its class is module-qualified (`triton.runtime.errors.
        OutOfResources: ...`, the final line of a traceback a post or a logger left out)."""
        from app.core.events import ErrorEvent
        from app.core.fields import extract_host, extract_rank

        out: dict[tuple[str, bool, bool], ErrorEvent] = {}
        for rec in self.records:
            if rec.line in self._covered or not (rec.in_traceback or rec.module):
                continue
            m = self.matches[rec.line]
            if m is FALLBACK or not m.specific:
                continue
            harmless = rec.line in self.harmless
            key = (m.entry_id, harmless, rec.line in self.after_exhaustion)
            ev = out.get(key)
            rank, host = extract_rank(rec.text), extract_host(rec.text)
            if ev is None:
                ev = out[key] = ErrorEvent(
                    id="", error_type=m.error_type, category=m.category, role=self._role(rec.line, m.role),
                    priority=m.priority, rule_id=m.entry_id, first_line=rec.line, count=0, text=rec.text, action=m.action,
                    hint=m.hint, first_rank=rank, first_host=host, chained=rec.chain is not None,
                    recovered=harmless)
            ev.count += 1
            ev.last_line = max(ev.last_line, rec.line)
            if rank is not None:
                ev.ranks.add(rank)
            if host:
                ev.hosts.add(host)
        return list(out.values())
