"""Format-free training signals: loss-like values and step counters in any trainer's layout.

Filter rules know the metric lines of the trainers they were written for. A trainer no rule
knows still prints its loss and its step in one of a few layouts, and this module reads them
without a rule:

- pairs: `key: value`, `key=value`, `'key': value` / `"key": value` (Python dicts, JSON lines),
  `key value` (fairseq, W&B summaries), `key: tensor(value, ...)`, and a key/value table's row
  `| key | value |` (OpenAI baselines' logger, as guided/improved diffusion print their dumps); a counter may carry its total
  (`iter 120/1000`, `Step: [120/5000]`, mmengine's `Iter(train) [ 120/1000]`);
- progress bars: `120/5000 [00:10<05:00, ...]`;
- tables: a header line of column names (`| step | loss |`, rich/W&B `┃ Step ┃ Loss ┃`, or
  columns two or more spaces apart), then rows of values under it.

Values are numbers or non-finite literals (nan, inf, -inf, NaN, Infinity, `tensor(nan, ...)`).
A key is *loss-like* when its last word is loss / losses / ppl / perplexity / gnorm or it names a
grad norm (`lm loss`, `train_loss`, `act_loss`, `loss_step`, `grad_norm`, `grad norm`), or it is a
term of the loss (`loss_cls`, `loss_mse`: a non-finite term counts, a finite one is no series), and
not a loss scale or a best/initial value; *a counter* when its last word is step / iter / iteration
/ it / num_updates (global), epoch, or batch. A key may be bracketed (`[Loss] nan`, `[step] 104`)
or joined to its value by is/was (`Loss is Infinity.`), or by `is not finite:` before a
non-finite value (verl's `grad_norm is not finite: nan`).

The compressor calls `SignalReader.classify` once per new line *shape* (the line without its
digits, app/core/compressor.py): a NaN line has another shape than its finite sibling
(`loss: 1.23` -> `loss: .`, `loss: nan` -> `loss: nan`), so the first non-finite line of every
layout reaches Python, and the lines of a known shape are counted, sampled and tracked as progress
by the C scan loop with no Python work. `ShapeSignal.read` then reads a line of that shape.
Switched off by `LOGDX_ABLATE=signals` (app/core/ablation.py).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

import re2

from app.core import ablation, regexcache

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_NONFINITE = r"[-+]?(?:[nN][aA][nN]|[iI][nN][fF](?:[iI][nN][iI][tT][yY])?)"
_WRAP = r"(?:(?:tensor|np\.float\d*|float\d*|array|Array)\(\[?)?"
# a key (one or two words and a copula, `grad norm is nan`; possessive: a key never gives back letters, ~1.7x faster), its
# separator, an optional wrapper/bracket, the value (a sentence's full stop may follow it:
# `Model diverged with loss = NaN.`; a version's second dot may not), an optional total
_PAIR_RE = regexcache.compile(
    r"(?<![\w.'\"/-])['\"]?(?P<key>[A-Za-z][\w./-]*+(?: [A-Za-z][\w/-]*+)?(?: (?:is|was)(?: not finite| non-finite)?)?)['\"]?(?:\(\w+\))?\]?"
    r"(?P<sep>\s*[:=]\s*|\s*[|│]\s*|\s+)\[?\s*['\"]?" + _WRAP
    + r"(?P<val>" + _NONFINITE + r"|" + _NUM + r")(?![\w(])(?!\.[\w(])['\"]?(?:\s*/\s*(?P<total>\d+)\b)?")
# mmengine / Lightning-style `[e][ b/B]` after an epoch key, and PyTorch's examples'
# `Train Epoch: e [b/B (p%)]` (b counts the epoch's samples)
_EPOCH_BATCH_RE = regexcache.compile(
    r"(?i)\bepoch(?:\(\w+\))?(?:\s*\[\s*(\d+)\s*\]|:?\s*(\d+))\s*\[\s*(\d+)\s*/\s*(\d+)(?:\s*\(\s*\d+(?:\.\d+)?%\))?\s*\]")
# a tqdm-style bar counter: `120/5000 [00:10<05:00`
_BAR_RE = regexcache.compile(r"(?<![\w./])(\d+)/(\d+) \[[\d:?]+<[\d:?]+")
# One RE2 set (a DFA: ~0.5 us a line, where the pair regex takes ~35 us) tells which layouts a
# line may hold: PAIRS, a key word with a value after it or a bar counter (a superset of what
# `_read_pairs` finds), HEADER, a line without digits naming a key word. Most new shapes are no
# training signal, and learning a shape must stay cheap (bench/README.md, `survive5`).
PAIRS, HEADER = 0, 1
_HINTS = re2.Set.SearchSet(re2.Options())
_HINTS.Add(r"(?i)(?:loss|cost|ppl|perplexity|norm|step|iter|epoch|batch|updates|\bit)\w*(?:[/-]\w+)*['\"]?(?:\(\w+\))?\]?(?:\s+(?:is|was)(?:\s+(?:not\s+|non-)finite)?)?\s*[:=|│]?\s*\[?\s*"
           r"['\"]?(?:\w[\w.]*\(\[?)?[-+]?(?:nan|inf|\.?\d)|\d/\d+ \[")
_HINTS.Add(r"(?i)^\D*(?:loss|cost|ppl|perplexity|norm|step|iter|epoch|batch|updates|\bit\b)\D*$")
_HINTS.Compile()
_NONFINITE_WORD = regexcache.compile(r"(?i)(?<![\w.])[-+]?(?:nan|inf(?:inity)?)(?![\w(])(?!\.\w)")
_TABLE_SEPS = "|│┃"
_CELL_NAME = regexcache.compile(r"[A-Za-z][\w./%()-]*(?: [A-Za-z][\w./%()-]*)*")
_CELL_VALUE = regexcache.compile(r"(?:" + _NONFINITE + r"|" + _NUM + r")")
_WS_SPLIT = regexcache.compile(r"\s{2,}|\t")
_DIGIT_RUNS = re.compile(r"(\d+)")
_WORD_SEPS = str.maketrans("_./-\t", "     ")

_LOSS_WORDS = frozenset({"loss", "cost", "ppl", "perplexity", "gnorm"})  # Marian prints its loss as "Cost"
_LOSS_SUFFIX = frozenset({"step", "epoch", "avg", "mean", "total", "train", "value"})
_NOT_LOSS = frozenset({"scale", "scaler", "best", "min", "prev", "previous", "init", "initial", "target",
                       "skipped", "nan", "max", "threshold", "weight", "coef", "coeff", "type", "fn"})
_EVAL_WORDS = frozenset({"val", "valid", "validation", "eval", "evaluation", "test", "dev"})
_STEP_WORDS = frozenset({"step", "iter", "iteration", "it", "num_updates", "global_step"})
_NOT_STEP = frozenset({"max", "total", "warmup", "save", "eval", "log", "logging", "skipped", "nan", "per",
                       "time", "sec", "second", "seconds", "of", "last", "next", "start", "num", "n"})
_STRONG_SEP = (":", "=")

# what a reading can name, in MetricPoint.values
LOSS, GRAD_NORM = "loss", "grad_norm"
PART = "part"  # a term of the loss (`loss_cls`): a non-finite one counts, a finite one is no series


def enabled() -> bool:
    return ablation.enabled("signals")


_COPULA = frozenset({"is", "was"})  # `Loss is 1.15` (BigDL, Spark-style prose metrics)


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")  # `IDLoss`, `trainLoss`, `gradNorm`


def _words(key: str) -> list[str]:
    words = _CAMEL.sub(" ", key).lower().translate(_WORD_SEPS).split()
    if len(words) > 2 and words[-1] == "finite" and words[-2] in ("not", "non"):
        del words[-2:]  # `grad_norm is not finite: nan` (verl), `loss is non-finite: inf`
    if len(words) > 1 and words[-1] in _COPULA:
        words.pop()
    return words


@lru_cache(maxsize=4096)  # (a log repeats its keys)
def loss_kind(key: str) -> str | None:
    """'loss', 'grad_norm', 'eval' (an eval/validation loss: non-finite counts, no series),
    'part' (a term of the loss, likewise) or 'ppl' for a loss-like key; None otherwise."""
    words = _words(key)
    if not words or _NOT_LOSS.intersection(words):
        return None
    last = words[-1]
    if last == "norm" and any(w.startswith("grad") for w in words):
        kind = GRAD_NORM
    elif last == "gnorm" or (last.startswith("grad") and last.endswith("norm")):
        kind = GRAD_NORM
    elif last in ("ppl", "perplexity"):
        kind = "ppl"
    elif last in ("loss", "losses") or (last in _LOSS_SUFFIX and "loss" in words[:-1]) or last.endswith("_loss"):
        kind = LOSS
    elif words[0] in ("loss", "losses") and len(words) <= 3:
        kind = PART  # a term of the loss: mmdet's `loss_cls`, `loss_bbox`, `loss_mse`
    else:
        return None
    if kind != GRAD_NORM and _EVAL_WORDS.intersection(words):
        return "eval"
    return kind


@lru_cache(maxsize=4096)
def counter_kind(key: str, sep: str = ":") -> str | None:
    """'step' (a global step/iteration counter), 'epoch' or 'batch' for a counter key, else None."""
    words = _words(key)
    if not words:
        return None
    joined = "_".join(words[-2:])
    if joined in ("num_updates", "global_step"):
        return "step"
    if _NOT_STEP.intersection(words):
        return None
    last = words[-1]
    if last == "it" and sep.strip() not in _STRONG_SEP:
        return None  # `it` is a word in prose; only `it=120` / `it: 120` count
    if last in _STEP_WORDS:
        return "step"
    if last == "epoch":
        return "epoch"
    if last in ("batch", "batch_idx", "idx") and (last != "idx" or "batch" in words):
        return "batch"
    return None


def _value(raw: str) -> float | None:
    try:
        return float(raw)
    except ValueError:
        low = raw.lower().lstrip("+")
        if low.startswith("-"):
            return -math.inf if "inf" in low else math.nan
        return math.nan if "nan" in low else (math.inf if "inf" in low else None)


@dataclass(slots=True)
class Reading:
    """What one line says: the step it names, loss/grad-norm values (non-finite ones included),
    and whether it is a progress marker."""

    step: int | None
    values: dict[str, float]
    nonfinite: bool
    progress: bool
    epoch_step: bool = False  # the step is an epoch number (the line's only counter)
    spans: dict[str, tuple[int, int]] | None = None  # where `step` and the finite values were read

    @property
    def finite_values(self) -> dict[str, float]:
        return {k: v for k, v in self.values.items() if math.isfinite(v)}


def _read_pairs(text: str) -> Reading | None:
    """The pairs layout (and a bar counter); None when the line names no loss-like key and no
    counter."""
    if PAIRS not in (_HINTS.Match(text) or ()):
        return None
    return _pairs(text)


def _pairs(text: str) -> Reading | None:
    step = epoch = batch = None
    step_total = batch_total = epoch_total = None
    values: dict[str, float] = {}
    spans: dict[str, tuple[int, int]] = {}
    nonfinite = False
    others = 0  # numeric pairs that are neither counters nor losses (lr, time, throughput...)
    seen = False
    # an eval loss before any training loss makes the line an evaluation's (`test loss = 32.1,
    # depth loss = 324.5`): its other loss terms are the evaluation's too, no point of the
    # training series (Keras' `loss: 0.52 - val_loss: 0.61` leads with the training loss)
    evaluation = False
    for m in _PAIR_RE.finditer(text):
        key, sep, raw, total = m.group("key"), m.group("sep"), m.group("val"), m.group("total")
        value = _value(raw)
        if value is None:
            continue
        kind = loss_kind(key)
        if kind is not None:
            seen = True
            if not math.isfinite(value):
                nonfinite = True
                slot = GRAD_NORM if kind == GRAD_NORM else LOSS
                values[slot] = value
            elif kind == "eval" and LOSS not in values:
                evaluation = True
            elif kind in (LOSS, GRAD_NORM) and kind not in values and not evaluation:
                values[kind] = value
                spans[kind] = m.span("val")
            continue
        ckind = counter_kind(key, sep.strip())
        if ckind is not None and raw.isdigit():
            seen = True
            n, t = int(raw), int(total) if total else None
            if ckind == "step" and step is None:
                step, step_total = n, t
                spans["step"] = m.span("val")
            elif ckind == "epoch" and epoch is None:
                epoch, epoch_total = n, t
                spans["epoch"] = m.span("val")
            elif ckind == "batch" and batch is None:
                batch, batch_total = n, t
                spans["batch"] = m.span("val")
            continue
        others += 1
    if epoch is not None and batch is None and (m := _EPOCH_BATCH_RE.search(text)):
        epoch, batch, batch_total = int(m.group(1) or m.group(2)), int(m.group(3)), int(m.group(4))
        spans["batch"] = m.span(3)
    bar = _BAR_RE.search(text)
    if bar is not None and step is None and batch is None:
        batch, batch_total, seen = int(bar.group(1)), int(bar.group(2)), True
        spans["batch"] = bar.span(1)
        if batch == 0:
            bar = None  # `0/101 [00:00<?`: no step done yet
    if not seen:
        return None
    counter = step is not None or batch is not None or epoch is not None
    # a counter is progress when the line also has metrics, a total, or is a bar: `Saving
    # checkpoint at step 1000` alone is not a training step
    progress = counter and not nonfinite and (batch != 0 or bar is not None) and (
        others > 0 or bool(values) or step_total is not None or batch_total is not None or bar is not None)
    epoch_step = False
    if step is None:
        if batch is None and epoch is not None:
            step, epoch_step = epoch, True  # `epoch: 3451 loss: 0.21`: the epoch is the only counter
            spans["step"] = spans["epoch"]
        elif batch is not None and (epoch is None or epoch == 0):
            step = batch  # a bar or batch counter of the first (or only) epoch
            spans["step"] = spans["batch"]
    spans.pop("epoch", None)
    spans.pop("batch", None)
    return Reading(step, values, nonfinite, progress and bool(counter), epoch_step, spans)


MAX_FAST_LINE = 2000  # longer first lines get no pattern of their own (read by the pair regex)


def _skeleton(segment: str) -> str:
    """A regex for text of this shape: each digit run any digits, the rest literally."""
    return "".join(r"\d*" if part.isdigit() else re.escape(part) for part in _DIGIT_RUNS.split(segment) if part)


def _fast_pattern(text: str, spans: dict[str, tuple[int, int]]) -> str | None:
    """A pattern that reads the lines of `text`'s shape by position: the line's skeleton, with the
    spans the pair regex read the step and values from as named groups (a few us a line, where
    the pair regex takes tens: the C loop samples these lines in every chunk)."""
    if len(text) > MAX_FAST_LINE or not spans:
        return None
    out, pos = [], 0
    for name, (a, b) in sorted(spans.items(), key=lambda kv: kv[1]):
        if a < pos:
            return None
        out.append(_skeleton(text[pos:a]))
        out.append(f"(?P<{name}>{_skeleton(text[a:b])})")
        pos = b
    out.append(_skeleton(text[pos:]))
    return "".join(out)


@lru_cache(maxsize=1024)
def _compiled(pattern: str) -> re.Pattern:
    return re.compile(pattern, re.S)


def _cells(text: str) -> tuple[str, list[str]] | None:
    """The cells of a table line and its separator kind ('|' or ' '), or None."""
    for sep in _TABLE_SEPS:
        if text.count(sep) >= 2:
            parts = [c.strip() for c in text.replace("│", "|").replace("┃", "|").split("|")]
            if parts and not parts[0]:
                parts = parts[1:]
            if parts and not parts[-1]:
                parts = parts[:-1]
            return "|", parts
    stripped = text.strip()
    if not stripped or ":" in stripped or "=" in stripped:
        return None
    parts = _WS_SPLIT.split(stripped)
    return (" ", parts) if len(parts) >= 2 else None


@dataclass(frozen=True, slots=True)
class Header:
    sep: str
    columns: tuple[str, ...]


def _header(text: str) -> Header | None:
    cells = _cells(text)
    if cells is None:
        return None
    sep, parts = cells
    if len(parts) < 2 or not all(_CELL_NAME.fullmatch(p) for p in parts):
        return None
    if not any(loss_kind(p) or counter_kind(p) for p in parts):
        return None
    return Header(sep, tuple(parts))


def _read_row(text: str, header: Header) -> Reading | None:
    cells = _cells(text)
    if cells is None or cells[0] != header.sep or len(cells[1]) != len(header.columns):
        return None
    step = epoch = batch = None
    values: dict[str, float] = {}
    nonfinite = False
    numeric = 0
    for name, cell in zip(header.columns, cells[1]):
        if not _CELL_VALUE.fullmatch(cell):
            if loss_kind(name) or counter_kind(name):
                return None  # a loss/step column holds text: not a row of this table
            continue
        numeric += 1
        value = _value(cell)
        kind = loss_kind(name)
        if kind is not None and value is not None:
            if not math.isfinite(value):
                nonfinite = True
                values[GRAD_NORM if kind == GRAD_NORM else LOSS] = value
            elif kind in (LOSS, GRAD_NORM) and kind not in values:
                values[kind] = value
            continue
        ckind = counter_kind(name)
        if ckind is not None and cell.isdigit():
            n = int(cell)
            if ckind == "step" and step is None:
                step = n
            elif ckind == "epoch" and epoch is None:
                epoch = n
            elif ckind == "batch" and batch is None:
                batch = n
    if numeric * 2 < len(header.columns):
        return None
    if step is None:
        step = epoch if batch is None else (batch if not epoch else None)
    counter = step is not None or batch is not None or epoch is not None
    return Reading(step, values, nonfinite, counter and not nonfinite)


@dataclass(frozen=True, slots=True)
class ShapeSignal:
    """How to read the lines of one shape: by pairs, or as rows under `header`. `extract`: its
    lines carry finite loss/grad-norm values (a metric series); `progress`: a counter (a
    progress marker); `nonfinite`: a loss-like value is nan/inf (the shape's every line is)."""

    header: Header | None
    extract: bool
    progress: bool
    nonfinite: bool
    fast: str | None = None  # a pattern reading the shape's lines by position (`_fast_pattern`)

    def read(self, text: str) -> Reading | None:
        if self.fast is not None and (m := _compiled(self.fast).fullmatch(text)) is not None:
            try:
                groups = m.groupdict()
                step = int(groups.pop("step")) if "step" in groups else None
                values = {k: float(v) for k, v in groups.items()}
            except ValueError:
                pass  # (a line of the shape that the positions do not fit: read it fully)
            else:
                return Reading(step, values, False, self.progress)
        return _read_pairs(text) if self.header is None else _read_row(text, self.header)

    def as_row(self) -> tuple:
        return ((self.header.sep, self.header.columns) if self.header else None, self.extract, self.progress,
                self.nonfinite, self.fast)

    @staticmethod
    def from_row(row: tuple) -> ShapeSignal:
        header, extract, progress, nonfinite, fast = row
        return ShapeSignal(Header(header[0], tuple(header[1])) if header else None, extract, progress, nonfinite, fast)


def _signal(reading: Reading | None, header: Header | None, text: str | None = None) -> ShapeSignal | None:
    if reading is None:
        return None
    extract = bool(reading.finite_values) and not reading.nonfinite
    if not (extract or reading.progress or reading.nonfinite):
        return None
    fast = None
    if header is None and not reading.nonfinite and reading.spans is not None and text is not None:
        fast = _fast_pattern(text, reading.spans)
    return ShapeSignal(header, extract, reading.progress, reading.nonfinite, fast)


class SignalReader:
    """Classifies lines (one per new shape) in line order; remembers the last table header."""

    def __init__(self) -> None:
        self.header: Header | None = None

    def classify(self, text: str) -> ShapeSignal | None:
        hints = _HINTS.Match(text) or ()
        if PAIRS in hints and (reading := _pairs(text)) is not None:
            return _signal(reading, None, text)
        header = _header(text) if HEADER in hints else None
        if header is not None:
            self.header = header
            return None
        if self.header is not None:
            return _signal(_read_row(text, self.header), self.header)
        return None


def has_nonfinite(text: str) -> bool:
    """A cheap test before reading a line for a non-finite value: a nan/inf word in it."""
    return _NONFINITE_WORD.search(text) is not None


def nonfinite_reading(text: str) -> Reading | None:
    """The reading of a line whose loss-like value is nan/inf (pairs layout), else None."""
    if not has_nonfinite(text):
        return None
    reading = _read_pairs(text)
    return reading if reading is not None and reading.nonfinite else None


def step_of(text: str, *, epochs: bool = True) -> int | None:
    """The step a line names in any pairs layout (None when it names none); `epochs=False`: not
    an epoch number standing in for the step."""
    reading = _read_pairs(text)
    if reading is None or (reading.epoch_step and not epochs):
        return None
    return reading.step

