"""Rule writers: propose a diagnosis rule from a confident LLM answer, and filter rules for bulk
metric-like lines that survived compression. Several candidates (generalised from the evidence,
plus the LLM's own when the backend writes JSON) are validated; the survivors vote on which lines
of the log the rule should catch, and the simplest pattern of the winning group is proposed."""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import regex

from app.core.fields import fold_key
from app.core.types import Category, ErrorType
from app.core.untrusted import UntrustedPattern, compile_untrusted
from app.llm.client import LLMClient
from app.llm.errors import LLMError
from app.llm.ports import ProposedRule, ProposedRuleSink
from app.llm.prompts import load_prompt
from app.llm.rulewriter.generalise import (
    candidates_from_line, extracting_pattern, literal_chars, mutate_numbers, strip_prefix,
)
from app.llm.rulewriter.validate import Validation, validate_rule

MIN_LITERAL = 12
_METRIC_HINT = regex.compile(
    r"(?i)\b(?:loss|lr|learning[_ ]rate|step|iter(?:ation)?|epoch|it/s|s/it|tokens?/s|samples?/s|tflops|"
    r"throughput|grad[_ ]?norm|elapsed|ms|eta|batch)\b")
_ERRORISH = regex.compile(r"(?i)error|exception|traceback|fail|fatal|killed|abort|timeout|timed out|nan\b|segfault")
_FALLBACK_NEGATIVE_METRICS = [
    "iteration      100/  500000 | consumed samples:        51200 | elapsed time per iteration (ms): 1234.5 | learning rate: 1.500E-04 | lm loss: 2.345678E+00 | loss scale: 65536.0 | grad norm: 0.912 |",
    "{'loss': 1.2345, 'grad_norm': 0.87, 'learning_rate': 4.9e-05, 'epoch': 0.12}",
    "Epoch 3:  45%|████▌     | 450/1000 [02:13<02:43,  3.37it/s, loss=2.31, v_num=0]",
    "step 1200 | loss 2.103 | lr 3.0e-4 | tokens/s 152340 | mfu 41.2%",
    "[2023-07-14 03:12:55,123] [INFO] [logging.py:96:log_dist] [Rank 0] step=1200, skipped=0, lr=[0.0003], mom=[(0.9, 0.95)]",
    "train_loss=2.4012 val_loss=2.5123 time=0.85s",
]


def load_lines(path: Path | str) -> list[str]:
    p = Path(path)
    if not p.is_file():
        return []
    return [ln.rstrip("\n") for ln in p.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]


def default_metric_negatives() -> list[str]:
    from app import resources

    return load_lines(resources.data_file("corpora", "metric_lines.txt")) or list(_FALLBACK_NEGATIVE_METRICS)


def error_lines_from_cases(cases_dir: Path | str) -> list[str]:
    """Evidence lines of labelled cases (`*/label.json`): the negative corpus for filter rules."""
    import json

    out = []
    for label in sorted(Path(cases_dir).glob("*/label.json")):
        ev = json.loads(label.read_text()).get("evidence")
        if isinstance(ev, str) and ev.strip():
            out.extend(x for x in ev.splitlines() if x.strip())
        elif isinstance(ev, list):
            out.extend(str(x) for x in ev if str(x).strip())
    return out


@dataclass
class Proposal:
    rule: ProposedRule | None
    proposal_id: str | None
    validations: dict[str, Validation] = field(default_factory=dict)  # candidate pattern -> result
    votes: dict[str, int] = field(default_factory=dict)
    reason: str = ""


def _rule_id(prefix: str, pattern: str) -> str:
    return f"{prefix}-{hashlib.sha256(pattern.encode()).hexdigest()[:8]}"


def _vote(valid: dict[str, Validation], compiled: dict[str, UntrustedPattern],
          corpus: Sequence[str]) -> tuple[str | None, dict[str, int]]:
    """Candidates vote with the set of corpus lines they match; the biggest bloc wins and its
    most specific-but-short pattern (enough literal text, then shortest) is chosen."""
    if not valid:
        return None, {}
    signature: dict[str, frozenset[int]] = {}
    for pat in valid:
        signature[pat] = frozenset(i for i, line in enumerate(corpus) if compiled[pat].search(line))
    blocs: dict[frozenset[int], list[str]] = defaultdict(list)
    for pat, sig in signature.items():
        blocs[sig].append(pat)
    winner_sig = max(blocs, key=lambda s: (len(blocs[s]), len(s)))
    pats = sorted(blocs[winner_sig], key=lambda p: (literal_chars(p) < MIN_LITERAL, len(p)))
    return pats[0], {p: len(blocs[signature[p]]) for p in valid}


class DiagnosisRuleWriter:
    def __init__(self, *, client: LLMClient | None = None, negatives: Sequence[str] | None = None,
                 family: str = "proposed") -> None:
        self.client = client
        self.negatives = list(negatives) if negatives is not None else default_metric_negatives()
        self.family = family
        self.prompt = load_prompt("rule_writer")

    def candidates(self, evidence: Sequence[str], error_type: ErrorType, context: str = "") -> tuple[list[str], str]:
        cands: list[str] = []
        for line in evidence[:3]:
            cands.extend(candidates_from_line(line))
        by = "generaliser"
        if self.client is not None and self.client.available and self.client.backend.supports_json:
            try:
                system, user = self.prompt.render(error_type=error_type.value, evidence=evidence[0],
                                                  context=context or "(none)")
                ans = self.client.complete_json(user, self.prompt.output_schema or {}, system=system,
                                                prompt_version=self.prompt.ref)
                cands.extend(str(p) for p in ans.data.get("patterns", []) if isinstance(p, str))
                by = f"llm:{self.client.backend.name}/{self.client.backend.model}+generaliser"
            except LLMError:
                pass
        return list(dict.fromkeys(cands)), by

    def propose(self, *, evidence: Sequence[str], error_type: ErrorType, category: Category,
                sink: ProposedRuleSink | None = None, context: str = "", corpus: Sequence[str] = (),
                hint: str | None = None, source_diagnosis_id: str | None = None,
                extra_candidates: Iterable[str] = ()) -> Proposal:
        evidence = [e for e in dict.fromkeys(evidence) if e.strip()]
        if not evidence:
            return Proposal(None, None, reason="no evidence lines")
        cands, by = self.candidates(evidence, error_type, context)
        cands = list(dict.fromkeys([*extra_candidates, *cands]))
        positives = list(dict.fromkeys([*evidence, *(mutate_numbers(e) for e in evidence)]))
        negatives = self.negatives[:3]
        validations: dict[str, Validation] = {}
        compiled: dict[str, UntrustedPattern] = {}
        for pat in cands:
            rule = {"id": _rule_id(f"proposed-{error_type.value.lower()}", pat), "error_type": error_type.value,
                    "category": category.value, "pattern": pat,
                    "hint": hint or f"Proposed from a confident diagnosis ({error_type.value}); review before approving.",
                    "examples": {"match": evidence[:3], "no_match": negatives}}
            v = validate_rule(rule, kind="diagnosis", positives=positives, negatives=self.negatives)
            validations[pat] = v
            if v.ok:
                compiled[pat] = compile_untrusted(pat)
        valid = {p: v for p, v in validations.items() if v.ok and literal_chars(p) >= MIN_LITERAL}
        best, votes = _vote(valid, compiled, list(corpus) or evidence)
        if best is None:
            return Proposal(None, None, validations, votes, "no candidate passed validation")
        rule = {"id": _rule_id(f"proposed-{error_type.value.lower()}", best), "error_type": error_type.value,
                "category": category.value, "pattern": best,
                "hint": hint or f"Proposed from a confident diagnosis ({error_type.value}); review before approving.",
                "examples": {"match": evidence[:3], "no_match": negatives}}
        proposed = ProposedRule("diagnosis", self.family, rule, evidence[:5],
                                {"chosen": validations[best].to_json_dict(), "votes": votes,
                                 "candidates": {p: v.errors for p, v in validations.items()}},
                                by, source_diagnosis_id)
        pid = sink.propose(proposed) if sink is not None else None
        return Proposal(proposed, pid, validations, votes, "proposed")


def metric_like(line: str) -> bool:
    return (len(regex.findall(r"\d+(?:\.\d+)?", line)) >= 2 and bool(_METRIC_HINT.search(line))
            and not _ERRORISH.search(line))


class FilterRuleWriter:
    """Bulk surviving lines that look like metrics/progress become `filter: metric` rules."""

    def __init__(self, *, negatives: Sequence[str], min_count: int = 20, family: str = "proposed-filters") -> None:
        self.negatives = list(negatives)
        self.min_count = min_count
        self.family = family

    def groups(self, lines: Iterable[tuple[str, int]]) -> list[tuple[str, list[str], int]]:
        """(fold key, sample lines, count) for metric-like groups seen at least `min_count` times."""
        samples: dict[str, list[str]] = defaultdict(list)
        counts: Counter = Counter()
        for text, n in lines:
            if not metric_like(text):
                continue
            key = fold_key(strip_prefix(text))
            counts[key] += n
            if len(samples[key]) < 10:
                samples[key].append(text)
        return [(k, samples[k], c) for k, c in counts.most_common() if c >= self.min_count]

    def propose(self, lines: Iterable[tuple[str, int]], *, sink: ProposedRuleSink | None = None,
                proposed_by: str = "generaliser") -> list[Proposal]:
        out = []
        for _, sample, count in self.groups(lines):
            positives = list(dict.fromkeys([*sample, *(mutate_numbers(s) for s in sample[:3])]))
            extracting = self._extracting(sample, positives, count, proposed_by, sink)
            if extracting is not None:
                out.append(extracting)
                continue
            validations, compiled = {}, {}
            for pat in list(dict.fromkeys(c for s in sample[:2] for c in candidates_from_line(s))):
                rule = {"id": _rule_id("proposed-metric", pat), "pattern": pat, "filter": "metric",
                        "examples": {"match": sample[:3], "no_match": self.negatives[:3]}}
                v = validate_rule(rule, kind="filter", positives=positives, negatives=self.negatives)
                validations[pat] = v
                if v.ok:
                    compiled[pat] = compile_untrusted(pat)
            valid = {p: v for p, v in validations.items() if v.ok and literal_chars(p) >= 6}
            best, votes = _vote(valid, compiled, positives)
            if best is None:
                out.append(Proposal(None, None, validations, votes, "no candidate passed validation"))
                continue
            rule = {"id": _rule_id("proposed-metric", best), "pattern": best, "filter": "metric",
                    "examples": {"match": sample[:3], "no_match": self.negatives[:3]}}
            proposed = ProposedRule("filter", self.family, rule, sample[:5],
                                    {"chosen": validations[best].to_json_dict(), "votes": votes, "count": count},
                                    proposed_by)
            pid = sink.propose(proposed) if sink is not None else None
            out.append(Proposal(proposed, pid, validations, votes, "proposed"))
        return out


    def _extracting(self, sample: list[str], positives: list[str], count: int, proposed_by: str,
                    sink: ProposedRuleSink | None) -> Proposal | None:
        """Preferred: a rule that also captures step/loss/... as named groups, so dropping the
        lines keeps the metric series (NaN, spikes) and the progress marker (hangs)."""
        pat = extracting_pattern(sample[0])
        if pat is None:
            return None
        compiled = regex.compile(pat)
        rule = {"id": _rule_id("proposed-metric", pat), "pattern": pat, "filter": "metric", "extract": True,
                "progress": "(?P<step>" in pat, "examples": {"match": sample[:3], "no_match": self.negatives[:3]}}
        v = validate_rule(rule, kind="filter", positives=positives, negatives=self.negatives)
        if not v.ok or not all(compiled.search(p) for p in positives):
            return None
        proposed = ProposedRule("filter", self.family, rule, sample[:5],
                                {"chosen": v.to_json_dict(), "votes": {pat: len(positives)}, "count": count,
                                 "extracts": sorted(compiled.groupindex)}, proposed_by)
        pid = sink.propose(proposed) if sink is not None else None
        return Proposal(proposed, pid, {pat: v}, {pat: len(positives)}, "proposed")


def surviving_lines(compressed: Any) -> list[tuple[str, int]]:
    """(text, count) of templates that survived compression and no error rule flagged."""
    return [(t.text, t.count) for t in getattr(compressed, "templates", []) if not t.flagged]


def propose_filter_rules(compressed: Any, *, ruleset: Any = None, negatives: Sequence[str] | None = None,
                         sink: ProposedRuleSink | None = None, min_count: int = 20) -> list[Proposal]:
    """The log agent's step after a compression: bulk metric-like lines that survived (no filter
    rule knows their format) become proposed filter rules, validated against error lines (by
    default every diagnosis rule's match examples of `ruleset`, else of the shipped rules) so an
    approved rule can never drop one."""
    negs = list(negatives) if negatives is not None else error_examples(ruleset)
    return FilterRuleWriter(negatives=negs, min_count=min_count).propose(surviving_lines(compressed), sink=sink)


def error_examples(ruleset: Any = None) -> list[str]:
    """Error lines a filter rule must never match: the diagnosis rules' own match examples."""
    if ruleset is None:
        from app.core.rules import load_rules

        ruleset = load_rules()
    return [text for rule in ruleset.diagnosis for text in rule.spec.examples.match]
