"""Patterns that do not come from the rule library: proposed rules (`POST /v1/rules/proposed`, the
LLM rule writers), the rules page's try form and a proposal's impact on stored logs.

They are compiled and run with RE2 only. RE2 matches in time linear in the line, so no pattern
can backtrack: a check on an engineer's or a model's pattern costs what the text costs. A pattern
RE2 cannot express (backreferences, lookaround, atomic groups, possessive quantifiers) is
refused, with the construct named, before anything runs it. The `regex` module still compiles
the pattern (rules are loaded with it, and it extracts named groups once a rule is approved), so
a proposal must compile in both; and since `regex` then runs it on the lines RE2 found, a
repetition of a body made only of repetitions (`(a+)+`, `(x+x+)+`, `(\\w+\\s?)+`, whose ways to
split a line grow exponentially) is refused too.

The work one call may do is bounded (`WORK_LIMIT`: characters searched times pattern length) so
a request cannot hold the interpreter for long: RE2 keeps the GIL while it searches.
"""

from __future__ import annotations

import re._constants as sre
import re._parser as sre_parse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import re2
import regex

from app.core.rules import GROUP_NAMES

MAX_PATTERN_CHARS = 2000
MIN_LITERAL_CHARS = 5  # `0`, `\d`, `.*`, `error` are not rules: `NCCL`+digit or a word of 5
WORK_LIMIT = 400_000_000  # characters searched x pattern length: about 0.3 s of RE2 at worst

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is reported to the caller, not to stderr
_REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT)

# RE2's parse errors, in words an engineer can act on
_RE2_CONSTRUCTS = (
    ("(?=", "a lookahead (?=...)"), ("(?!", "a negative lookahead (?!...)"),
    ("(?<=", "a lookbehind (?<=...)"), ("(?<!", "a negative lookbehind (?<!...)"),
    ("(?>", "an atomic group (?>...)"), ("(?P=", "a named backreference (?P=name)"),
    ("(?P>", "a recursive pattern"), ("(?R", "a recursive pattern"),
)


class PatternRefused(ValueError):
    """The pattern is not run: `reason` says why, `code` names the check."""

    def __init__(self, reason: str, code: str = "invalid_pattern") -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


@dataclass(frozen=True)
class UntrustedPattern:
    pattern: str
    ignore_case: bool
    compiled: object  # re2._Regexp

    def search(self, line: str) -> bool:
        return self.compiled.search(line) is not None

    def matching(self, lines: Iterable[str]) -> list[str]:
        return [line for line in lines if self.compiled.search(line) is not None]


def _re2_reason(pattern: str, message: str) -> str:
    for token, words in _RE2_CONSTRUCTS:
        if token in message or (token in pattern and "perl operator" in message):
            return f"RE2 cannot run {words}; rewrite it without"
    if "escape sequence" in message and regex.search(r"\\[1-9]", message):
        return "RE2 cannot run a backreference (\\1 ...); rewrite it without"
    if "repetition operator" in message and regex.search(r"[*+?}]\+", message):
        return "RE2 cannot run a possessive quantifier (a++, a*+ ...); use a plain one"
    if "repetition size" in message:
        return "RE2 runs counted repetitions up to {1000}; use + or *"
    return f"RE2 cannot run it ({message})"


def compile_untrusted(pattern: str, *, ignore_case: bool = False) -> UntrustedPattern:
    """The pattern compiled with RE2, or `PatternRefused` saying why it will not run."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternRefused(f"pattern is {len(pattern)} characters; at most {MAX_PATTERN_CHARS}")
    try:
        checked = regex.compile(pattern, regex.IGNORECASE if ignore_case else 0)
    except regex.error as exc:
        raise PatternRefused(f"pattern does not compile ({exc})") from None
    unknown = set(checked.groupindex) - GROUP_NAMES
    if unknown:
        raise PatternRefused(f"unknown named group(s) {sorted(unknown)}; allowed: {sorted(GROUP_NAMES)}")
    try:
        compiled = re2.compile(f"(?i:{pattern})" if ignore_case else pattern, _OPTIONS)
    except re2.error as exc:
        message = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise PatternRefused(_re2_reason(pattern, message), code="pattern_not_re2") from None
    tree = _parse(pattern)
    if tree is not None and _nested_repeat(tree):
        raise PatternRefused("a repetition of repetitions (like (a+)+ or (\\w+\\s?)+) backtracks "
                             "exponentially in the regex module that extracts a rule's groups; "
                             "put a literal or separator inside the repeated group", code="pattern_backtracks")
    if compiled.search("") is not None:
        raise PatternRefused("pattern matches the empty string: it would match every line", code="pattern_too_broad")
    literal = _literal_chars(tree) if tree is not None else _rough_literal_chars(pattern)
    if literal < MIN_LITERAL_CHARS:
        raise PatternRefused(f"pattern needs only {literal} literal character(s) in a match; a rule needs at "
                             f"least {MIN_LITERAL_CHARS} (words of the message, not just digits or classes)",
                             code="pattern_too_broad")
    return UntrustedPattern(pattern, ignore_case, compiled)


def check_work(pattern: UntrustedPattern, chars: int) -> None:
    """Refuse a search of `chars` characters that would cost more than `WORK_LIMIT`."""
    work = chars * max(len(pattern.pattern), 1)
    if work > WORK_LIMIT:
        raise PatternRefused(f"{chars} characters x a {len(pattern.pattern)}-character pattern is more work "
                             f"than one request may do ({WORK_LIMIT:,}); paste fewer lines", code="too_much_work")


def _parse(pattern: str):
    """The pattern's parse tree (Python's `re` syntax), or None where that syntax differs from
    RE2's (`\\pL`, `(?<name>`): the structural checks then fall back to a rough count."""
    try:
        return sre_parse.parse(pattern)
    except Exception:  # noqa: BLE001 - any parse failure only means: no tree to inspect
        return None


def _children(op, av) -> list:  # noqa: ANN001
    if op in _REPEATS:
        return [av[2]]
    if op in (sre.SUBPATTERN, sre.ATOMIC_GROUP):
        return [av[-1]]
    if op == sre.BRANCH:
        return list(av[1])
    if op in (sre.ASSERT, sre.ASSERT_NOT):
        return [av[1]]
    return []


def _unbounded(op, av) -> bool:  # noqa: ANN001
    return op in _REPEATS and av[1] == sre.MAXREPEAT


def _only_repeats(items) -> bool:  # noqa: ANN001
    """A sequence that is nothing but repetitions (through groups), one of them unbounded: the
    same text splits between them in many ways."""
    flat = list(items)
    while len(flat) == 1 and flat[0][0] == sre.SUBPATTERN:
        flat = list(flat[0][1][-1])
    if not flat or any(op not in _REPEATS for op, _ in flat):
        return False
    return any(_unbounded(op, av) for op, av in flat)


def _nested_repeat(items) -> bool:  # noqa: ANN001
    for op, av in items:
        if op in _REPEATS and (av[1] == sre.MAXREPEAT or av[1] > 1) and _only_repeats(av[2]):
            return True
        if any(_nested_repeat(child) for child in _children(op, av)):
            return True
    return False


def _literal_chars(items) -> int:  # noqa: ANN001
    """Literal characters every match contains (a class, `.` or `\\d` counts none)."""
    total = 0
    for op, av in items:
        if op == sre.LITERAL:
            total += 1
        elif op in _REPEATS:
            total += min(av[0], 100) * _literal_chars(av[2])
        elif op in (sre.SUBPATTERN, sre.ATOMIC_GROUP):
            total += _literal_chars(av[-1])
        elif op == sre.BRANCH:
            total += min(_literal_chars(b) for b in av[1])
    return total


def _rough_literal_chars(pattern: str) -> int:
    stripped = regex.sub(r"\\[pP](?:\{[^}]*\}|\w)|\\[sSdDwWbB]|\[[^\]]*\]|\(\?[^)]*\)|[()^$|.+*?{}0-9,]", "", pattern)
    return len(regex.sub(r"\\(.)", r"\1", stripped))


def _data_lines(name: str) -> list[str]:
    from app import resources

    path = resources.data_file("corpora", name)
    if not path.is_file():
        return []
    return [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip() and not ln.startswith("#")]


@lru_cache(maxsize=1)
def benign_lines() -> tuple[str, ...]:
    """Metric, progress and normal training lines no diagnosis rule may match (the project's
    corpora `tests/data/metric_lines.txt` and `normal_lines.txt`, else a few built in)."""
    lines = _data_lines("metric_lines.txt") + _data_lines("normal_lines.txt")
    return tuple(lines or _BUILT_IN_BENIGN)


_BUILT_IN_BENIGN: Sequence[str] = (
    " iteration      100/  500000 | consumed samples:        51200 | elapsed time per iteration (ms): 1234.5 | "
    "learning rate: 1.500E-04 | lm loss: 2.345678E+00 | loss scale: 65536.0 | grad norm: 0.912 | "
    "number of skipped iterations:   0 | number of nan iterations:   0 |",
    "{'loss': 1.2345, 'grad_norm': 0.87, 'learning_rate': 4.9e-05, 'epoch': 0.12}",
    "Epoch 3:  45%|████▌     | 450/1000 [02:13<02:43,  3.37it/s, loss=2.31, v_num=0]",
    "step 1200 | loss 2.103 | lr 3.0e-4 | tokens/s 152340 | mfu 41.2%",
    "[2023-07-14 03:12:55,123] [INFO] [logging.py:96:log_dist] [Rank 0] step=1200, skipped=0, lr=[0.0003]",
    "train_loss=2.4012 val_loss=2.5123 time=0.85s",
)
