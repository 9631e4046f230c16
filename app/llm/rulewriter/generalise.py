"""Turn concrete log lines into candidate regexes at several levels of generality."""

from __future__ import annotations

import regex

# variable parts of a line, most specific first; each becomes a generic sub-pattern
_VARIABLE = [
    (r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?", r"\S+"),
    (r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b", r"[0-9a-fA-F-]+"),
    (r"(?<![\d.])\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?(?![\d.])", r"[\d.:]+"),
    (r"0x[0-9a-fA-F]+", r"0x[0-9a-fA-F]+"),
    (r"(?:[A-Za-z]:)?(?:/[\w.@+-]+)+/?", r"\S+"),
    (r"\b[0-9a-f]{7,}\b", r"[0-9a-f]+"),
    (r"[-+]?(?:\d+\.\d*|\.\d+|\d+)[eE][-+]?\d+", r"[-+\d.eE]+"),
    (r"\d+\.\d+", r"\d+(?:\.\d+)?"),
    (r"\d+", r"\d+"),
    (r"'[^'\n]{0,200}'|\"[^\"\n]{0,200}\"", r"""(?:'[^'\n]*'|"[^"\n]*")"""),
]
_VAR_RE = regex.compile("|".join(f"(?P<v{i}>{p})" for i, (p, _) in enumerate(_VARIABLE)))
# prefixes that vary per job: timestamps, [rank3]:, hostnames with pid, log levels
_PREFIX_RE = regex.compile(
    r"^(?:\s*(?:\[?\d{4}-\d\d-\d\d[T ][\d:.,]+\]?|\[?[\w.-]+:\d+:\d+\]?|\[(?:default|rank)?\d+\]:?|"
    r"[\w.-]+:\d+:\d+|(?:INFO|WARNING|WARN|ERROR|CRITICAL|DEBUG)\b:?|\d+:|[\w-]+\s*\|)\s*)+")
_ERROR_TOKEN = regex.compile(r"\b[A-Za-z_][\w.]*(?:Error|Exception|Failure|Fault)\b|\bError\b|\berror\b|\bfailed\b|\bFATAL\b")


def strip_prefix(line: str) -> str:
    return _PREFIX_RE.sub("", line.strip(), count=1).strip()


def _generalise(text: str) -> str:
    out, pos = [], 0
    for m in _VAR_RE.finditer(text):
        out.append(_escape_words(text[pos:m.start()]))
        idx = int(next(k for k, v in m.groupdict().items() if v is not None)[1:])
        out.append(_VARIABLE[idx][1])
        pos = m.end()
    out.append(_escape_words(text[pos:]))
    pattern = "".join(out)
    # collapse runs of generic parts, which otherwise nest and backtrack
    pattern = regex.sub(r"(?:\\S\+|\[[^\]]+\]\+)(?:\\s\+(?:\\S\+|\[[^\]]+\]\+))+", r"\\S+(?:\\s+\\S+)*?", pattern)
    return pattern


def _escape_words(text: str) -> str:
    parts = regex.split(r"(\s+)", text)
    return "".join(r"\s+" if p.isspace() else regex.escape(p, literal_spaces=True) for p in parts if p)


def literal_chars(pattern: str) -> int:
    """Rough specificity: characters matched literally."""
    stripped = regex.sub(r"\\[sSdDwW][+*]?|\[[^\]]*\][+*]?|\(\?:[^)]*\)[+*?]*|[+*?]", "", pattern)
    return len(regex.sub(r"\\(.)", r"\1", stripped))


def candidates_from_line(line: str, *, max_words: int = 12) -> list[str]:
    """Several generalisations of one evidence line: whole message, error core, stable head."""
    body = strip_prefix(line)
    out: list[str] = []
    if body:
        out.append(_generalise(body[:240]))
    m = _ERROR_TOKEN.search(body)
    if m:
        core = body[m.start():]
        words = core.split()
        out.append(_generalise(" ".join(words[:max_words])))
    # the longest run of stable words (no digits or path characters)
    runs, cur = [], []
    for w in body.split():
        if regex.search(r"[\d/\\=]|0x", w) or len(w) > 40:
            if cur:
                runs.append(cur)
            cur = []
        else:
            cur.append(w)
    if cur:
        runs.append(cur)
    if runs:
        best = max(runs, key=lambda r: sum(map(len, r)))
        if len(best) >= 3:
            out.append(r"\s+".join(regex.escape(w) for w in best[:max_words]))
    # dedupe, drop anchorless wildcards
    seen, result = set(), []
    for p in out:
        p = p.strip()
        if p and p not in seen and literal_chars(p) >= 8:
            seen.add(p)
            result.append(p)
    return result


def mutate_numbers(line: str) -> str:
    """The same line with every number changed: a second example to prove a rule generalises."""
    return regex.sub(r"\d+", lambda m: str((int(m.group(0)[:9]) + 7) % (10 ** min(len(m.group(0)), 9))).zfill(len(m.group(0))), line)


# metric keys a trainer prints before a value, and the group each becomes in an extracting
# filter rule (the names the compressor reads: step, loss, grad_norm, loss_scale, lr, throughput)
_METRIC_KEYS = [
    ("step", r"(?:global[_ ]?)?step|iter(?:ation)?|it|update|batch"),
    ("loss", r"(?:lm[_ ]|train[_ ]|total[_ ])?loss|xent|ce(?:_loss)?|nll"),
    ("grad_norm", r"grad(?:ient)?[_ ]?norm|gnorm|gn"),
    ("loss_scale", r"loss[_ ]scale|scale"),
    ("lr", r"lr|learning[_ ]rate"),
    ("throughput", r"tput|throughput|tokens?/s(?:ec)?|tok/s|samples?/s(?:ec)?"),
]
_KEY_RE = regex.compile(
    r"(?P<key>" + "|".join(f"(?P<k_{name}>{pat})" for name, pat in _METRIC_KEYS) + r")"
    r"(?P<sep>['\"]?\s*[:=]?\s*)(?P<num>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)(?![\w.])",
    regex.IGNORECASE)
_NUMBER_PATTERN = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf"


def extracting_pattern(line: str) -> str | None:
    r"""A filter pattern for a metric line that captures its known metrics as named groups
    (`step 000120/050000 | xent 2.31` -> `step\s+(?P<step>\d+)…xent\s+(?P<loss>…)`), so the
    series (NaN, spikes) and the progress marker survive the drop. None without a step or loss,
    or with fewer than two known keys."""
    body = strip_prefix(line)
    out, pos, used = [], 0, set()
    for m in _KEY_RE.finditer(body):
        name = next(n for n, _ in _METRIC_KEYS if m.group(f"k_{n}"))
        if name in used or (m.start() > 0 and (body[m.start() - 1].isalnum() or body[m.start() - 1] == "_")):
            continue
        used.add(name)
        between = body[pos:m.start()]
        if out:  # the text before the first key (timestamps, hosts, ranks) is left out
            out.append(_generalise(between) if between.strip() else (r"\s*" if between else ""))
        group = r"\d+" if name == "step" else _NUMBER_PATTERN
        out.append(_escape_words(m.group("key")) + (r"['\"]?\s*[:=]?\s*" if m.group("sep") else "")
                   + f"(?P<{name}>{group})")
        pos = m.end()
    if not ({"step", "loss"} & used) or len(used) < 2:  # one key alone is too weak an anchor
        return None
    return "".join(out)
