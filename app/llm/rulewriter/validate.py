"""Validation a proposed rule must pass before it is stored for review.

1. compiles (the `regex` module, as rules/ are loaded) and uses only known named groups;
2. does not match the empty string (too generic);
3. is not catastrophically slow: searched on pathological inputs with a timeout;
4. matches every one of its evidence lines;
5. matches nothing in the negative corpus (metric lines for diagnosis rules, error lines for
   filter rules);
6. the emitted rule dict is valid under DiagnosisRuleSpec / FilterRuleSpec and its examples pass.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import regex
from pydantic import ValidationError

from app.core.rules import GROUP_NAMES, DiagnosisRuleSpec, FilterRuleSpec
from app.core.validation import error_message

PROBE_TIMEOUT_S = 0.05  # per probe; a linear-time pattern needs well under 1 ms per probe line
PROBE_LENGTHS = (32, 4096)


@dataclass
class Validation:
    ok: bool
    errors: list[str] = field(default_factory=list)
    positives_matched: int = 0
    positives_total: int = 0
    negatives_matched: list[str] = field(default_factory=list)
    negatives_total: int = 0
    slowest_probe_ms: float = 0.0
    re2_compatible: bool = False

    def to_json_dict(self) -> dict[str, Any]:
        return asdict(self)


def _probes(positives: Sequence[str]) -> list[str]:
    chars = set("a0 -_=./:\t\\x")
    for p in positives[:3]:
        chars |= set(p[:200])
    probes = []
    for n in PROBE_LENGTHS:
        for c in sorted(chars)[:60]:
            probes.append(c * n + "\x00")
        probes.append("a_" * (n // 2) + "!")
        probes.append("1." * (n // 2) + "e")
    for p in positives[:2]:  # the evidence stretched: repeated without its ending
        probes.append((p[:-1] + " ") * 40)
        probes.append(p * 20 + "\x00")
    return probes


def slow_probe(compiled: regex.Pattern, positives: Sequence[str] = (), *,
               timeout_s: float = PROBE_TIMEOUT_S) -> tuple[bool, float]:
    """(True when a probe timed out, slowest probe in ms)."""
    slowest = 0.0
    for probe in _probes(positives):
        t0 = time.perf_counter()
        try:
            compiled.search(probe, timeout=timeout_s)
        except TimeoutError:
            return True, timeout_s * 1000
        slowest = max(slowest, (time.perf_counter() - t0) * 1000)
    return False, round(slowest, 3)


def validate_rule(rule: dict[str, Any], *, kind: str, positives: Sequence[str], negatives: Sequence[str]) -> Validation:
    """Validate a complete rule dict (as it would be written to rules/*.yaml)."""
    pattern = rule.get("pattern", "")
    v = Validation(ok=False, positives_total=len(positives), negatives_total=len(negatives))
    flags = regex.IGNORECASE if rule.get("ignore_case") else 0
    try:
        compiled = regex.compile(pattern, flags)
    except (regex.error, TypeError) as exc:
        v.errors.append(f"does not compile: {exc}")
        return v
    unknown = set(compiled.groupindex) - GROUP_NAMES
    if unknown:
        v.errors.append(f"unknown named group(s) {sorted(unknown)}")
    if compiled.search("") is not None:
        v.errors.append("matches the empty string (too generic)")
    slow, v.slowest_probe_ms = slow_probe(compiled, positives)
    if slow:
        v.errors.append(f"catastrophic backtracking: a pathological probe ran over {PROBE_TIMEOUT_S * 1000:.0f} ms")
        return v
    missing = []
    for line in positives:
        try:
            hit = compiled.search(line, timeout=PROBE_TIMEOUT_S)
        except TimeoutError:
            hit = None
        if hit:
            v.positives_matched += 1
        else:
            missing.append(line)
    if missing:
        v.errors.append(f"misses {len(missing)} evidence line(s), e.g. {missing[0][:160]!r}")
    if not positives:
        v.errors.append("no evidence lines to check against")
    for line in negatives:
        try:
            if compiled.search(line, timeout=PROBE_TIMEOUT_S):
                v.negatives_matched.append(line)
        except TimeoutError:
            v.negatives_matched.append(line)
    if v.negatives_matched:
        v.errors.append(f"matches {len(v.negatives_matched)} negative line(s), e.g. {v.negatives_matched[0][:160]!r}")
        v.negatives_matched = v.negatives_matched[:5]
    model = DiagnosisRuleSpec if kind == "diagnosis" else FilterRuleSpec
    try:
        spec = model.from_json_dict(rule)
        for ex in spec.examples.match:
            if not compiled.search(ex, timeout=PROBE_TIMEOUT_S):
                v.errors.append(f"example does not match: {ex[:120]!r}")
        for ex in spec.examples.no_match:
            if compiled.search(ex, timeout=PROBE_TIMEOUT_S):
                v.errors.append(f"no_match example matches: {ex[:120]!r}")
    except ValidationError as exc:
        v.errors.append("not a valid rule: " + "; ".join(f"{'.'.join(map(str, e['loc']))}: {error_message(e)}"
                                                          for e in exc.errors()))
    except TimeoutError:
        v.errors.append("an example timed out")
    try:
        import re2

        re2.compile(pattern)
        v.re2_compatible = True
    except Exception:  # noqa: BLE001 - informational only; the matcher falls back to `regex`
        v.re2_compatible = False
    v.ok = not v.errors
    return v
