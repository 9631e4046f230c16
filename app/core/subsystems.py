"""The subsystem vocabulary: the last resort for an error line no rule typed.

Rules type a failure by its wording; a new emitter's wording has no rule yet. Yet most failure
messages, whoever prints them, name the part of the system that failed and say that it failed:
`cuda driver library failed to get device context`, `Failed to communicate with Device CPU
(habanalabs)`, `failed to connect to all addresses`, `execd is in unknown state`. When the
diagnosis would otherwise be `Unknown` with error-looking lines the job did not survive, each
such line at error severity is read against `rules/subsystems.yaml`: a line that names a
subsystem (GPU, node, storage, network: the entry's `nouns`) and a failure (its `failure` words)
is typed by that entry; among a log's lines the highest priority wins (a GPU's fault before the
node loss, storage and network errors it causes), then the earliest line.

It only names the family: the answer keeps a low confidence, so the action stays `investigate`
(the controller does not drain or restart on a word), and the explanation says how it was
reached. A line the emitter printed at warning, info or debug level is not read (the program went
on from it), nor a line without a severity of its own that continues such a message (the lines
of a multi-line warning), nor a line that says its failure is over or retried (`resolved`,
`resuming`, `reconnecting`, `retrying`), nor a line of a traceback printed at teardown (the
caller's `harmless`).
Off under `LOGDX_ABLATE=subsystems`.
"""

from __future__ import annotations

from dataclasses import dataclass

import regex

from app.core import regexcache
from app.core.events import glog_not_error
from app.core.exceptions import TEARDOWN_FUNCS
from app.core.types import ErrorType

# the confidence of a root cause typed by vocabulary: below the low-confidence policy's 0.4, so the
# action is `investigate`, above a "no rule matched" line's 0.2
VOCABULARY_CONFIDENCE = 0.35
# the confidence of a root cause typed by a cut traceback's frames: the program was inside that
# client's call when it failed, which says more than a word on a line; at the policy's threshold
# its type's policy acts (an HTTP or object-store client's failure: a bounded retry)
FRAMES_CONFIDENCE = 0.45

# a line at a non-error severity: Python logging's WARNING/INFO/DEBUG, logfmt's level=, `[W ...]`,
# Python's `...Warning:` (an NCCL WARN is NCCL's error level, but an NCCL line no rule types is
# its own event, not a line read here)
# (the level names as loggers print them, upper case: "a warning above" in prose is no level)
_SOFT_SEVERITY = regexcache.compile(
    r"(?<![\w-])(?:WARNING|WARN|INFO|DEBUG|NOTICE)(?![\w-])|(?i:\blevel=(?:warn|warning|info|debug)\b)"
    r"|\[[WI] |\b[A-Z]\w*Warning:|(?:^|[\s>])warning: ")  # (gdb's / a compiler's `warning: ...`)
# NCCL's own error level is WARN
_NCCL_WARN = regexcache.compile(r"\bNCCL WARN\b")
# a line that says the failure it names is over or is being retried (`wandb: Network error resolved
# after 0:01:10, resuming normal operation`, `connection lost, reconnecting`, `will retry`)
_RECOVERY_NOTICE = regexcache.compile(
    r"(?i)\b(?:resolved|resuming|resumed|recovered|reconnect(?:ed|ing)|retrying|will retry|succeeded)\b")


# a line that carries a severity of error or worse by its own marker (glog E/F, a logging level,
# `error:` / `Error:` as a prefix, an exception line, a level before a bracketed tag: MIOpen's
# `MIOpen(HIP): Error [SetIsaName] ...` among its `Warning [...]` lines)
_ERROR_LEVEL = regexcache.compile(
    r"(?:^|[\s\]>|:])(?:[EF]\d{4} \d\d:\d\d|[EF] [\w./-]+\.(?:cc|cpp|c|h):\d+\])"
    r"|(?<![\w-])(?:ERROR|FATAL|CRITICAL|SEVERE)(?![\w-])|\b[Ee]rror:|\b[A-Z]\w*(?:Error|Exception):"
    r"|(?<![\w-])(?:Error|Fatal) \[\w")
CONTINUATION_LINES = 3


def _soft(text: str) -> bool:
    return glog_not_error(text) or (bool(_SOFT_SEVERITY.search(text)) and not _NCCL_WARN.search(text))


def _continues_soft(line: int, text: str, nearby: dict[int, str]) -> bool:
    """The line has no severity of its own and continues a message printed at warning level: the
    nearest line above it (within CONTINUATION_LINES) with a severity marker is a warning
    (gRPC's `Additional GRPC error information from remote target ...` under TensorFlow's `W ...
    Failed to retrieve preemption notice ...`)."""
    if _ERROR_LEVEL.search(text) or _soft(text):
        return False
    for back in range(1, CONTINUATION_LINES + 1):
        above = nearby.get(line - back)
        if above is None:
            return False
        if _soft(above):
            return True
        if _ERROR_LEVEL.search(above):
            return False
    return False


@dataclass(frozen=True)
class Typed:
    rule_id: str
    error_type: ErrorType
    priority: int
    line: int
    text: str
    hint: str | None


# a cut traceback: its header, its frame lines and the source / caret lines under them (after a
# launcher's `[rank0]: ` / `[1,0]<stderr>:` prefix); anything else after the header ends it (the
# exception line, more output)
_TB_HEADER = regexcache.compile(r"\bTraceback \(most recent call last\):\s*$")
_FRAME = regexcache.compile(r'\bFile "(?P<path>[^"\n]+)", line \d+, in (?P<func>[\w<>.]+)\s*$')
_TB_BODY = regexcache.compile(r"^(?:\[[\w,]+\](?:<\w+>)?: ?)?\s{2,}\S|^\s*[\^~]+\s*$")
# how far the log's last line may be after the cut traceback's last kept line
CUT_TRACEBACK_END = 2


class Vocabulary:
    def __init__(self, specs) -> None:
        self.entries = [(s, regex.compile(s.nouns, regex.I), regex.compile(s.failure, regex.I))
                        for s in specs if s.nouns is not None]
        self.frame_entries = [(s, regex.compile(s.frames)) for s in specs if s.frames is not None]

    def type_frame(self, path: str):
        """The entry (highest priority) whose `frames` matches a frame's file path, or None."""
        best = None
        for spec, frames in self.frame_entries:
            if (best is None or spec.priority > best.priority) and frames.search(path):
                best = spec
        return best

    def type_frames(self, paths) -> tuple[int, object] | None:
        """(index, entry) of the frame among `paths` whose entry has the highest priority (the
        first of them on a tie), or None when no entry knows any of them."""
        found = None
        for i, path in enumerate(paths):
            spec = self.type_frame(path)
            if spec is not None and (found is None or spec.priority > found[1].priority):
                found = (i, spec)
        return found

    def type_cut_traceback(self, tail: dict[int, str], last_line: int) -> Typed | None:
        """A Python traceback the log ends in, cut before its exception line (a post or a log
        collector truncated it, the process was killed while printing it): the frames it shows say
        what the program was doing when it failed. `tail`: the log's kept lines by number; they
        must end, within CUT_TRACEBACK_END lines of `last_line`, in frame and source lines after a
        traceback header (or at least two frames where the excerpt has no header). Typed by the
        highest-priority entry whose `frames` matches one of its frames (the innermost on a tie),
        None otherwise or when a frame is the interpreter's teardown."""
        # the run of frame and source lines the log ends in, back to its header (or, where the
        # excerpt has none, to the first line that is neither: then at least two frames)
        frames, headed, last = [], False, None
        for n in sorted(tail, reverse=True):
            t = tail[n]
            if last is None:
                last = n
                if last_line - n > CUT_TRACEBACK_END:
                    return None
            if (m := _FRAME.search(t)) is not None:
                if m.group("func") in TEARDOWN_FUNCS or "atexit" in m.group("path"):
                    return None  # the interpreter's teardown (app/core/exceptions.py)
                frames.append((n, t, m.group("path")))
            elif _TB_HEADER.search(t):
                headed = True
                break
            elif not _TB_BODY.search(t):
                break  # its exception line, or other output (where it is the last line: not cut)
        if not frames or (not headed and len(frames) < 2):
            return None
        found = self.type_frames(path for _, _, path in frames)  # innermost first
        if found is None:
            return None
        i, spec = found
        n, t, _ = frames[i]
        return Typed(spec.id, spec.error_type, spec.priority, n, t, spec.hint)

    def type_line(self, text: str):
        """The entry that types this line (an `exact` one before the others, then the first of the
        highest priority), or None. A status name that says what failed (`MASTER_CONNECTION_FAILED`)
        is read as its words (see `spell_status_names`)."""
        if _soft(text) or _RECOVERY_NOTICE.search(text):
            return None
        text = spell_status_names(text)
        best = None
        for spec, nouns, failure in self.entries:
            if best is not None and (best.exact, best.priority) >= (spec.exact, spec.priority):
                continue
            if nouns.search(text) and failure.search(text):
                best = spec
        return best

    def type_lines(self, lines, nearby: dict[int, str] | None = None) -> Typed | None:
        """The most causal typed line among `(line, text)` pairs: highest priority, then earliest.
        `nearby`: the log's kept lines by number, to tell a line that continues a warning."""
        found: Typed | None = None
        for line, text in lines:
            if nearby and _continues_soft(line, text, nearby):
                continue
            spec = self.type_line(text[:4000])
            if spec is None:
                continue
            if found is None or (spec.priority, -line) > (found.priority, -found.line):
                found = Typed(spec.id, spec.error_type, spec.priority, line, text, spec.hint)
        return found


# A library's status name in upper snake case that itself says something failed
# (`MASTER_CONNECTION_FAILED`, `ERROR_CONNECTION_REFUSED`, `PEER_CONNECTION_LOST`): a new emitter's
# enum is made of the same nouns and failure words as its prose, joined by underscores, which the
# vocabulary's whole-word nouns do not see. Only names holding a failure word are spelt out (an
# environment variable such as CUDA_VISIBLE_DEVICES or NCCL_SOCKET_IFNAME names no failure).
_STATUS_NAME_RE = regexcache.compile(
    r"(?<![\w.])(?=[A-Z0-9_]*(?:FAIL|ERROR|TIMEOUT|TIMED_OUT|REFUSED|RESET|LOST|UNAVAILABLE|UNREACHABLE"
    r"|CLOSED|ABORT|DEAD|DISCONNECT))[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+(?![\w.])")


def spell_status_names(text: str) -> str:
    """`text` with each failure-naming status name spelt as lower-case words (see _STATUS_NAME_RE)."""
    if "_" not in text:
        return text
    return _STATUS_NAME_RE.sub(lambda m: m.group(0).replace("_", " ").lower(), text)


def vocabulary_of(ruleset) -> Vocabulary:
    return ruleset.derived("subsystem_vocabulary", lambda: Vocabulary(getattr(ruleset, "subsystems", [])))


def check_vocabulary_examples(vocab: Vocabulary) -> list[tuple[str, str, bool]]:
    """(entry id, example, expected to be typed by it) for every example that is not."""
    def frame_entry(text: str):  # a frame entry's examples are frame lines
        m = _FRAME.search(text)
        return vocab.type_frame(m.group("path")) if m else None

    bad = []
    for specs, typer in (([s for s, _ in vocab.frame_entries], frame_entry),
                         ([s for s, _, _ in vocab.entries], vocab.type_line)):
        for spec in specs:
            for text in spec.examples.match:
                got = typer(text)
                if got is None or got.id != spec.id:
                    bad.append((spec.id, text, True))
            for text in spec.examples.no_match:
                got = typer(text)
                if got is not None and got.id == spec.id:
                    bad.append((spec.id, text, False))
    return bad
