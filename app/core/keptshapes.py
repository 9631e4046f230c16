"""Kept shapes counted without per-line Python work.

A surviving line of a shape already seen (same text once its digits are deleted) that is *plain*
(no diagnosis rule, no traceback-chain marker, no binary junk) changes nothing but its
template's count, last line, rank set and host set. Such a shape becomes a *kept slot*: its
lines are counted (in the C scan loop, or here for the pure-Python loop), and only a line whose
rank or host field carries values not seen before for that slot (a new *variant*) is handed to
the full per-line path, so rank and host sets stay complete.

Fields are located once per shape, from its first line, as ranges of *shape positions*: the
number of non-digit bytes before a digit run. Every line of the shape has the same non-digit
bytes, so its rank digits sit at the same shape position.

A shape is never counted this way when a diagnosis rule could match one of its lines with other
digits (a rule with digit literals such as `Xid ...: 79`, relaxed to any digits, matches it):
those lines keep going through the rules one by one.
"""

from __future__ import annotations

import re

import regex

from app.core.rules import DiagnosisRule, bounded_match

MAX_VARIANTS = 1 << 18  # the same cap as MAX_VARIANTS in _shapescan.c: past it, lines are counted
NO_FIELD = (0, -1)  # an empty shape-position range
_DIGIT_RUN = re.compile(rb"[0-9]+")

# (rank lo, rank hi, host lo, host hi, host starts with a digit): inclusive shape-position ranges
Fields = tuple[int, int, int, int, int]


_QUANT = re.compile(r"(?:[?*+]|\{\d*,?\d*\})[?+]?")
_DIGIT_CLASS = re.compile(r"\[(?:\d(?:-\d)?|\\d)+\]")


def relax_digits(pattern: str) -> str:
    """The pattern with every digit atom (a literal digit, `\\d`, a class of digits only) and its
    quantifier made `\\d*`: it matches a line whenever the rule matches some line of the same
    shape (any digits, any number of them). Over-matching only costs speed (the shape's lines
    keep going through the rules); under-matching would hide an error (`loss scale to: 0.25`
    and `… to: 0.0001` have one shape, and only the second is a collapse)."""
    out: list[str] = []
    i, n, in_class = 0, len(pattern), False

    def digit_atom(width: int) -> None:
        nonlocal i
        i += width
        q = _QUANT.match(pattern, i)
        if q:
            i = q.end()
        if not (out and out[-1] == r"\d*"):
            out.append(r"\d*")

    while i < n:
        c = pattern[i]
        if in_class:
            if c == "\\":
                out.append(pattern[i:i + 2])
                i += 2
                continue
            in_class = c != "]" or (out and out[-1] in ("[", "[^"))
            out.append(c)
            i += 1
            continue
        if c == "\\":
            nxt = pattern[i + 1:i + 2]
            if nxt == "d":
                digit_atom(2)
                continue
            width = {"x": 4, "u": 6, "U": 10}.get(nxt, 2)
            if nxt.isdigit():  # a backreference or octal escape
                while i + width < n and pattern[i + width].isdigit():
                    width += 1
            out.append(pattern[i:i + width])
            i += width
            continue
        m = _DIGIT_CLASS.match(pattern, i)
        if m:
            digit_atom(m.end() - i)
            continue
        if c == "[":
            in_class = True
            if pattern.startswith("[^", i):
                out.append("[^")
                i += 2
                continue
            out.append(c)
        elif c == "{":
            close = pattern.find("}", i)
            if close > 0 and re.fullmatch(r"\{\d*,?\d*\}", pattern[i:close + 1]):
                out.append(pattern[i:close + 1])
                i = close + 1
                continue
            out.append(c)
        elif c.isdigit():
            digit_atom(1)
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def digit_form(pattern: str, flags: int) -> tuple[str, str] | None:
    """How DigitSensitivity runs a diagnosis rule: None when the pattern has no digit atom (its
    relaxation is itself), ("re2", the relaxation's set form) or ("regex", the relaxation) when
    RE2 cannot run it. Computed once, when the rules cache is built."""
    from app.core.matcher import re2_form

    loose = relax_digits(pattern)
    if loose == pattern:
        return None
    text = re2_form(loose, flags)
    return ("re2", text) if text is not None else ("regex", loose)


class DigitSensitivity:
    """Does a diagnosis rule match a line of this shape for some other digits? (built on first
    use: only logs with surviving lines pay for it)."""

    def __init__(self, rules: list[DiagnosisRule]) -> None:
        self._rules = rules
        self._set = None
        self._slow: list[regex.Pattern] = []  # relaxed patterns RE2 cannot run

    def _build(self):
        import re2

        from app.core.matcher import SET_OPTIONS

        # (the digit forms of the shipped rules take 5.9 MiB of RE2's default 8 on 2026-12-07: the
        # matcher's budget, so approved rules cannot make the set fail to build)
        rset = re2.Set.SearchSet(SET_OPTIONS)
        for rule in self._rules:
            form = getattr(rule.regex, "digit_form", ...)  # the rules cache holds it
            if form is ...:
                form = digit_form(rule.regex.pattern, rule.regex.flags)
            if form is None:
                continue
            kind, text = form
            if kind == "re2":
                try:
                    rset.Add(text)
                    continue
                except Exception:  # (re2_form checked it compiles alone): searched with `regex`
                    text = relax_digits(rule.regex.pattern)
            try:
                self._slow.append(regex.compile(text, rule.regex.flags))
            except regex.error:  # a relaxation that does not compile: the rule as written
                self._slow.append(rule.regex)
        rset.Compile()
        return rset

    def __call__(self, text: str) -> bool:
        if self._set is None:
            self._set = self._build()
        if self._set.Match(text):
            return True
        # (a pattern that ran out of time on the line counts as matching: the shape is then
        # treated as digit-sensitive, and its lines are kept rather than folded)
        return any(bounded_match(rx, text, timed_out=True) for rx in self._slow)


def _shape_pos(raw: bytes, offset: int) -> int:
    return len(raw[:offset].translate(None, b"0123456789"))


def field_ranges(raw: bytes, text: str, rank_m: regex.Match | None, host_m: regex.Match | None) -> Fields | None:
    """Shape-position ranges of the rank and host fields of this line, or None when character
    offsets of `text` cannot be mapped to bytes of `raw` (not valid UTF-8). A host is read back
    from the byte of the shape position before its first digit run (its first letter), or, for
    a host that starts with a digit (`10.0.0.15: ` from pdsh), from its first digit run."""
    if raw.isascii():
        def offset(k: int) -> int:
            return k
    else:
        if text.encode("utf-8", "surrogatepass") != raw:
            return None

        def offset(k: int) -> int:
            return len(text[:k].encode("utf-8"))
    rank = NO_FIELD
    if rank_m is not None:
        pos = _shape_pos(raw, offset(rank_m.start(1)))
        rank = (pos, pos)
    host = NO_FIELD
    digit_start = 0
    if host_m is not None:
        start, end = _shape_pos(raw, offset(host_m.start(1))), _shape_pos(raw, offset(host_m.end(1)))
        if host_m.group(1)[:1].isdigit():  # an address: its first digit run starts it
            host, digit_start = (start, end), 1
        else:  # a name starts with a letter: digits right before it are not part of it
            host = (start + 1, end)
    return (*rank, *host, digit_start)


def variant_key(raw: bytes, fields: Fields) -> tuple:
    """The digit runs of the field ranges, with their shape positions (the C loop hashes the same)."""
    lo1, hi1, lo2, hi2, _ = fields
    top = max(hi1, hi2)
    if top < 0:
        return ()
    out = []
    digits = 0
    for m in _DIGIT_RUN.finditer(raw):
        pos = m.start() - digits
        if pos > top:
            break
        if lo1 <= pos <= hi1 or lo2 <= pos <= hi2:
            out.append((pos, m.group()))
        digits += m.end() - m.start()
    return tuple(out)


def field_values(raw: bytes, fields: Fields) -> tuple[int | None, str | None]:
    """The rank and host of a line of a kept slot, read at the slot's shape positions."""
    lo1, hi1, lo2, hi2, digit_start = fields
    first = lo2 if digit_start else lo2 - 1  # shape position of the host's first byte
    rank = None
    host_start = host_end = None
    digits = 0  # digit bytes before the current shape position
    for m in _DIGIT_RUN.finditer(raw):
        pos = m.start() - digits
        if lo2 <= hi2:
            if host_start is None and pos > first - digit_start:
                host_start = first + digits
            if host_end is None and pos > hi2:
                host_end = hi2 + digits
        if lo1 <= pos <= hi1:
            rank = int(m.group()) if m.end() - m.start() <= 9 else None
        digits += m.end() - m.start()
        if pos > max(hi1, hi2):
            break
    host = None
    if lo2 <= hi2:
        start = first + digits if host_start is None else host_start
        end = hi2 + digits if host_end is None else host_end
        host = raw[start:end].decode("utf-8", "replace")
    return rank, host
