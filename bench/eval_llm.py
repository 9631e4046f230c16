"""Compare rules-only, rules+retrieval and rules+retrieval+LLM on labelled real failure logs.

    python bench/eval_llm.py [--cases /work/shared/realworld-dev] [--backend transformers|openai|none]
                             [--base-url URL --model M] [--json out.json]

Retrieval is leave-one-out: every other labelled case is in the store (as human-confirmed), the
case itself is excluded. The agent is consulted only when the ranking is unsure (confidence under
the trigger) or nothing matched, exactly as in the service. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from app.core.pipeline import Pipeline  # noqa: E402
from app.core.types import ActionKind, Category, ErrorType  # noqa: E402
from app.llm.agent import AgentConfig, FailureAgent  # noqa: E402
from app.llm.backends import create_backend  # noqa: E402
from app.llm.client import LLMClient  # noqa: E402
from app.llm.examples import ExampleIndex, rule_examples  # noqa: E402
from app.llm.ports import InMemoryCaseStore  # noqa: E402
from app.llm.retrieval import MiniLMEmbedder, Retriever  # noqa: E402

DEFAULT_CASES = Path("/work/shared/realworld-dev")


def load_cases(root: Path) -> list[tuple[str, Path, dict]]:
    """Case folders under root/cases (realworld-dev: label.json) or root itself (the corpus in
    tests/golden/corpus: meta.json)."""
    base = root / "cases" if (root / "cases").is_dir() else root
    out = []
    for d in sorted(p for p in base.iterdir() if p.is_dir()):
        label = next((d / n for n in ("label.json", "meta.json") if (d / n).is_file()), None)
        if label is not None and (d / "log.txt").is_file():
            out.append((d.name, d / "log.txt", json.loads(label.read_text())))
    return out


def score(rows: list[dict], key: str) -> dict:
    n = len(rows)
    rc = sum(r[key]["error_type"] == r["label"]["root_cause"] for r in rows)
    act = sum(r[key]["action"] == r["label"]["action"] for r in rows)
    return {"n": n, "root_cause_acc": rc / n if n else 0.0, "action_acc": act / n if n else 0.0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=Path, default=DEFAULT_CASES)
    ap.add_argument("--backend", default="transformers")
    ap.add_argument("--base-url")
    ap.add_argument("--model")
    ap.add_argument("--api-key", default=os.environ.get("LOGDX_LLM_API_KEY"))
    ap.add_argument("--trigger-below", type=float, default=AgentConfig.trigger_below)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--ablate", action="store_true",
                    help="for each case, remove the diagnosis rule that found its root cause (simulates an "
                         "error family the rules do not know yet, as in the held-back cases)")
    args = ap.parse_args(argv)

    cases = load_cases(args.cases)
    pipe = Pipeline()
    results, rows, ablated = {}, [], {}
    t0 = time.perf_counter()
    for name, log, label in cases:
        results[name] = pipe.diagnose(log)
        if args.ablate and results[name].diagnosis.root_cause.rule_id:
            import dataclasses

            gone = ablated[name] = results[name].diagnosis.root_cause.rule_id
            rs = dataclasses.replace(pipe.ruleset, diagnosis=[r for r in pipe.ruleset.diagnosis if r.id != gone])
            results[name] = Pipeline(rs).diagnose(log)
    rules_s = (time.perf_counter() - t0) / max(1, len(cases))
    embedder = MiniLMEmbedder()
    all_examples = ExampleIndex(embedder, rule_examples(pipe.ruleset.diagnosis))

    def examples_for(name: str) -> ExampleIndex:  # the ablated rule's examples go with it
        return all_examples.without_rule(ablated[name]) if name in ablated else all_examples

    t0 = time.perf_counter()
    retriever = Retriever(embedder, InMemoryCaseStore())
    for name, _, label in cases:
        retriever.add_labelled(name, results[name], error_type=ErrorType(label["root_cause"]),
                               category=Category(label["category"]), action=ActionKind(label["action"]),
                               human_confirmed=True, evidence=label.get("evidence"))
    index_s = time.perf_counter() - t0

    opts = {}
    if args.backend == "openai":
        opts = {k: v for k, v in {"base_url": args.base_url, "model": args.model, "api_key": args.api_key}.items() if v}
    elif args.backend == "transformers" and args.model:
        opts = {"model": args.model}
    t0 = time.perf_counter()
    backend = create_backend(args.backend, **opts)
    load_s = time.perf_counter() - t0
    cfg = AgentConfig(trigger_below=args.trigger_below)
    example_agent = FailureAgent(LLMClient(create_backend("none")), config=cfg, policies=pipe.ruleset.policies)
    retrieval_agent = FailureAgent(LLMClient(create_backend("none")), retriever=retriever, config=cfg)
    llm_client = LLMClient(backend)
    llm_agent = FailureAgent(llm_client, retriever=retriever, config=cfg, policies=pipe.ruleset.policies)
    retrieval_agent.policies = pipe.ruleset.policies

    per_case = []
    for name, _, label in cases:
        res = results[name]
        excl = frozenset({name})
        example_agent.examples = retrieval_agent.examples = llm_agent.examples = examples_for(name)
        t = time.perf_counter()
        d_ex = example_agent.refine(res)
        ex_s = time.perf_counter() - t
        t = time.perf_counter()
        d_ret = retrieval_agent.refine(res, exclude_cases=excl)
        ret_s = time.perf_counter() - t
        before = len(llm_client.calls.records)
        t = time.perf_counter()
        ref = llm_agent.review(res, exclude_cases=excl)
        llm_s = time.perf_counter() - t
        recs = llm_client.calls.records[before:]
        d_llm = ref.diagnosis
        row = {
            "case": name, "label": {"root_cause": label["root_cause"], "action": label["action"]},
            "rules": {"error_type": res.diagnosis.root_cause.error_type.value,
                      "action": res.diagnosis.action.kind.value, "confidence": res.diagnosis.root_cause.confidence},
            "examples": {"error_type": d_ex.root_cause.error_type.value, "action": d_ex.action.kind.value,
                         "decided_by": d_ex.decided_by.value, "latency_s": ex_s},
            "retrieval": {"error_type": d_ret.root_cause.error_type.value, "action": d_ret.action.kind.value,
                          "decided_by": d_ret.decided_by.value, "latency_s": ret_s},
            "llm": {"error_type": d_llm.root_cause.error_type.value, "action": d_llm.action.kind.value,
                    "decided_by": d_llm.decided_by.value, "latency_s": llm_s, "calls": len(recs),
                    "tokens_in": sum(r.tokens_in for r in recs), "tokens_out": sum(r.tokens_out for r in recs),
                    "verdict": ref.verdict.to_json_dict() if ref.verdict else None},
        }
        rows.append(row)
        per_case.append(row)

    n = len(rows)
    table = [("rules only", score(rows, "rules"), 0, 0, 0, rules_s, 0),
             ("rules + rule-example retrieval (no model)", score(rows, "examples"), 0, 0, 0,
              rules_s + sum(r["examples"]["latency_s"] for r in rows) / n,
              sum(r["examples"]["decided_by"] == "retrieval" for r in rows)),
             ("rules + examples + case retrieval", score(rows, "retrieval"), 0, 0, 0,
              rules_s + sum(r["retrieval"]["latency_s"] for r in rows) / n,
              sum(r["retrieval"]["decided_by"] == "retrieval" for r in rows)),
             (f"rules + retrieval + LLM ({backend.name}:{backend.model})", score(rows, "llm"),
              sum(r["llm"]["calls"] for r in rows) / n, sum(r["llm"]["tokens_in"] for r in rows) / n,
              sum(r["llm"]["tokens_out"] for r in rows) / n,
              rules_s + sum(r["llm"]["latency_s"] for r in rows) / n,
              sum(r["llm"]["decided_by"] != "rules" for r in rows))]
    print(f"\n{n} cases from {args.cases}{' (root-cause rule ablated per case)' if args.ablate else ''}; agent consulted when ranking confidence < {cfg.trigger_below} "
          f"or Unknown ({sum(1 for r in rows if r['rules']['confidence'] < cfg.trigger_below or r['rules']['error_type'] == 'Unknown')} cases); "
          f"model load {load_s:.1f}s, index {index_s:.1f}s\n")
    print("| mode | root cause acc | action acc | LLM calls/diag | tokens in/diag | tokens out/diag | latency/diag (s) | changed by aid |")
    print("|---|---|---|---|---|---|---|---|")
    for name, s, calls, tin, tout, lat, changed in table:
        print(f"| {name} | {s['root_cause_acc']:.2f} | {s['action_acc']:.2f} | {calls:.2f} | {tin:.0f} | {tout:.0f} | {lat:.2f} | {changed} |")
    print("\n| case | label | rules | +examples | +retrieval | +LLM (conf) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        v = r["llm"]["verdict"]
        llm = r["llm"]["error_type"] + (f" ({v['choice']} {v['confidence']:.2f}{' ✓' if v['accepted'] else ''})" if v else "")
        print(f"| {r['case']} | {r['label']['root_cause']} | {r['rules']['error_type']} ({r['rules']['confidence']:.2f}) "
              f"| {r['examples']['error_type']} | {r['retrieval']['error_type']} | {llm} |")
    if args.json:
        args.json.write_text(json.dumps({"table": [t[:2] for t in table], "cases": per_case}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
