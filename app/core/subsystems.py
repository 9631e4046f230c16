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
on from it), nor is a line of a traceback printed at teardown (the caller's `harmless`).
Off under `LOGDX_ABLATE=subsystems`.
"""

from __future__ import annotations

from dataclasses import dataclass

import regex

from app.core import regexcache
from app.core.events import GLOG_NOT_ERROR
from app.core.types import ErrorType

# the confidence of a root cause typed by vocabulary: below the low-confidence policy's 0.4, so the
# action is `investigate`, above a "no rule matched" line's 0.2
VOCABULARY_CONFIDENCE = 0.35

# a line at a non-error severity: Python logging's WARNING/INFO/DEBUG, logfmt's level=, `[W ...]`,
# Python's `...Warning:` (an NCCL WARN is NCCL's error level, but an NCCL line no rule types is
# its own event, not a line read here)
_SOFT_SEVERITY = regexcache.compile(
    r"(?i)(?<![\w-])(?:WARNING|WARN|INFO|DEBUG|NOTICE)(?![\w-])|level=(?:warn|warning|info|debug)\b"
    r"|\[[WI] |\b[A-Z]\w*Warning:")
# NCCL's own error level is WARN
_NCCL_WARN = regexcache.compile(r"\bNCCL WARN\b")


@dataclass(frozen=True)
class Typed:
    rule_id: str
    error_type: ErrorType
    priority: int
    line: int
    text: str
    hint: str | None


class Vocabulary:
    def __init__(self, specs) -> None:
        self.entries = [(s, regex.compile(s.nouns, regex.I), regex.compile(s.failure, regex.I)) for s in specs]

    def type_line(self, text: str):
        """The entry that types this line (the first of the highest priority), or None."""
        if GLOG_NOT_ERROR.search(text) or (_SOFT_SEVERITY.search(text) and not _NCCL_WARN.search(text)):
            return None
        best = None
        for spec, nouns, failure in self.entries:
            if (best is None or spec.priority > best.priority) and nouns.search(text) and failure.search(text):
                best = spec
        return best

    def type_lines(self, lines) -> Typed | None:
        """The most causal typed line among `(line, text)` pairs: highest priority, then earliest."""
        found: Typed | None = None
        for line, text in lines:
            spec = self.type_line(text[:4000])
            if spec is None:
                continue
            if found is None or (spec.priority, -line) > (found.priority, -found.line):
                found = Typed(spec.id, spec.error_type, spec.priority, line, text, spec.hint)
        return found


def vocabulary_of(ruleset) -> Vocabulary:
    return ruleset.derived("subsystem_vocabulary", lambda: Vocabulary(getattr(ruleset, "subsystems", [])))


def check_vocabulary_examples(vocab: Vocabulary) -> list[tuple[str, str, bool]]:
    """(entry id, example, expected to be typed by it) for every example that is not."""
    bad = []
    for spec, _, _ in vocab.entries:
        for text in spec.examples.match:
            got = vocab.type_line(text)
            if got is None or got.id != spec.id:
                bad.append((spec.id, text, True))
        for text in spec.examples.no_match:
            got = vocab.type_line(text)
            if got is not None and got.id == spec.id:
                bad.append((spec.id, text, False))
    return bad
