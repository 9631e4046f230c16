"""Measure the failure agent with a model that cannot be called from here: record the exact prompts
the agent sends, let the model answer them elsewhere, replay the answers through the agent.

    python bench/llm_exchange.py record CASES OUT [--prompt root_cause@v2]
    python bench/llm_exchange.py replay CASES OUT [--prompt root_cause@v2] [--aggregates-only]

`record` runs each case of CASES (a corpus or sealed folder, or realworld-dev) through the rules and,
where the agent would consult the model (ranking confidence under the trigger, or nothing
matched: exactly as `logdx diagnose --llm openai` does), writes the request it would send to a
hosted model (masked, as it leaves the machine) to OUT/req-NNN.json: `system`, `user` and the
answer's JSON `schema`. The case names are kept apart in OUT/private-map.json (the answering model
reads the requests only, so a sealed split stays sealed). Whoever answers writes OUT/ans-NNN.json,
one JSON object per request as the schema asks.

`replay` runs the same cases again with a backend that returns those answers (a stand-in for the
remote API, named `exchange`: not a model; a request without an answer is a failed call, so the
agent keeps the rules' result as it does when the endpoint is down) and prints type / family /
action accuracy and false alarms for rules alone and for rules + the agent, how many cases were
sent and how many answers the agent accepted (its validation: a known candidate or `other`, a
cited line that exists, confidence over `accept_at`). `--aggregates-only` prints no case names
(for a sealed split).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from app.core.pipeline import Pipeline  # noqa: E402
from app.core.types import ErrorType, family_of  # noqa: E402
from app.llm.agent import AgentConfig, FailureAgent  # noqa: E402
from app.llm.backends.base import JSONAnswer, Usage, approx_tokens  # noqa: E402
from app.llm.breaker import CircuitBreaker  # noqa: E402
from app.llm.client import LLMClient  # noqa: E402
from app.llm.errors import LLMError  # noqa: E402
from app.llm.factory import example_index, retrieval_available  # noqa: E402
from app.llm.prompts import load_prompt  # noqa: E402
from eval_llm import load_cases  # noqa: E402  (bench/: the script's own folder)


class ExchangeBackend:
    """Records each JSON request (record) or answers it from a file (replay). Hosted: the client
    masks hosts and secrets as it would for a remote API."""

    name = "exchange"
    hosted = True
    supports_json = True
    context_tokens = 16384

    def __init__(self, folder: Path, replay: bool) -> None:
        self.model = "stand-in"
        self.folder = folder
        self.replay = replay
        self.current: str | None = None  # request id of the case being run
        self.sent: set[str] = set()

    def complete_json(self, prompt: str, schema: dict[str, Any], *, system: str | None = None) -> JSONAnswer:
        assert self.current is not None
        req = self.folder / f"req-{self.current}.json"
        if not self.replay:
            req.write_text(json.dumps({"system": system, "user": prompt, "schema": schema}, indent=1))
            self.sent.add(self.current)
            raise LLMError("recorded, not sent")
        ans = self.folder / f"ans-{self.current}.json"
        if not ans.is_file():
            raise LLMError("no answer recorded for this request")
        sent = json.loads(req.read_text())
        if sent["user"] != prompt:
            raise LLMError("the request differs from the recorded one (rules or prompt changed): record again")
        self.sent.add(self.current)
        try:
            data = json.loads(ans.read_text())
        except json.JSONDecodeError as exc:
            raise LLMError(f"answer is not JSON: {exc}") from None
        return JSONAnswer(data, Usage(approx_tokens(prompt), 100))

    def score_choices(self, prompt, choices, *, system=None):  # pragma: no cover - json mode only
        raise LLMError("json mode only")

    def count_tokens(self, text: str) -> int:
        return approx_tokens(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["record", "replay"])
    ap.add_argument("cases", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--prompt", default="root_cause", help="prompt task[@version] (default: the latest)")
    ap.add_argument("--aggregates-only", action="store_true")
    ap.add_argument("--accept-at", type=float, default=AgentConfig.accept_at,
                    help=f"the model's confidence needed to replace the rules' answer (default {AgentConfig.accept_at})")
    ap.add_argument("--trigger-below", type=float, default=AgentConfig.trigger_below,
                    help=f"ranking confidence under which the model is asked (default {AgentConfig.trigger_below})")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    task, _, version = args.prompt.partition("@")
    pipeline = Pipeline()
    backend = ExchangeBackend(args.out, replay=args.mode == "replay")
    examples = example_index(pipeline.ruleset) if retrieval_available() else None
    # (every recorded request is a failed call: the breaker must not open on them)
    client = LLMClient(backend, mask=True, breaker=CircuitBreaker(failures=10**9))
    agent = FailureAgent(client, policies=pipeline.ruleset.policies, examples=examples,
                         config=AgentConfig(accept_at=args.accept_at, trigger_below=args.trigger_below), json_prompt=load_prompt(task, version or None))
    cases = load_cases(args.cases)
    map_path = args.out / "private-map.json"
    ids = json.loads(map_path.read_text()) if map_path.is_file() else {}
    ids = {name: ids.get(name) or hashlib.sha256(name.encode()).hexdigest()[:10] for name, _, _ in cases}
    if args.mode == "record":
        map_path.write_text(json.dumps(ids, indent=1))
    score: Counter = Counter()
    rows = []
    for name, log, label in cases:
        backend.current = ids[name]
        result = pipeline.diagnose(log)
        rules = result.diagnosis
        final = agent.refine(result)
        neg = bool(label.get("negative_control"))
        for who, d in (("rules", rules), ("agent", final)):
            t, a = d.root_cause.error_type.value, d.action.kind.value
            score[f"{who} type"] += t == label["root_cause"]
            score[f"{who} family"] += family_of(t) == family_of(label["root_cause"])
            score[f"{who} action"] += a == label["action"]
            score[f"{who} false alarms"] += neg and t != ErrorType.Unknown.value
            if a != label["action"] and a in ("isolate_and_restart", "no_retry", "retry"):
                # the wrong actions that cost most: a healthy node drained, a job stopped, a futile restart
                score[f"{who} wrong {a.removesuffix('_and_restart')}"] += 1
        score["negative controls"] += neg
        score["decided by the model"] += final.decided_by.value == "llm"
        rows.append((name, rules.root_cause.error_type.value, final.root_cause.error_type.value,
                     final.action.kind.value, label["root_cause"], label["action"]))
    n = len(cases)
    score["sent to the model"] = len(backend.sent)
    print(f"cases: {n}  ({args.mode}, prompt {agent.json_prompt.ref})")
    for key in sorted(score):
        pct = f" = {100 * score[key] / n:.1f} %" if key.split()[-1] in ("type", "family", "action") else ""
        print(f"  {key:24} {score[key]}{pct}")
    if args.mode == "replay" and not args.aggregates_only:
        for name, rt, ft, fa, lt, la in rows:
            if rt != ft:
                print(f"  {name[:70]:70} rules {rt} -> {ft}/{fa} | label {lt}/{la}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
