"""The local backend for real, with the packaged Gemma 3 270M (one load per session)."""

import pytest

from app.core.types import ErrorType
from app.llm.agent import AgentConfig, FailureAgent
from app.llm.client import LLMClient
from app.llm.errors import UnsupportedOperation

from tests.llm.conftest import make_result

pytestmark = pytest.mark.slow


def test_loads_offline_and_counts_tokens(gemma_backend):
    assert gemma_backend.name == "transformers" and gemma_backend.model.startswith("gemma-3-270m")
    assert 0 < gemma_backend.count_tokens("CUDA out of memory") < 10


def test_scores_choices_as_a_distribution(gemma_backend):
    s = gemma_backend.score_choices("Which word is a colour? A) red B) chair. Answer with the letter.",
                                    ["A", "B", "blue chair"])
    assert len(s.logprobs) == 3 and abs(sum(s.probs) - 1) < 1e-6
    assert all(lp < 0 for lp in s.logprobs)
    # multi-token choices score lower than a single likely token (sum of log-probs)
    assert s.logprobs[2] < max(s.logprobs[:2])


def test_never_free_writes(gemma_backend):
    with pytest.raises(UnsupportedOperation):
        gemma_backend.complete_json("x", {})


def test_agent_returns_a_valid_verdict(gemma_backend):
    agent = FailureAgent(LLMClient(gemma_backend), config=AgentConfig(max_log_tokens=600))
    ref = agent.review(make_result())
    v = ref.verdict
    assert v is not None and v.mode == "choice"
    assert v.choice in {"e1", "e2", "e3"} and v.error_type in {ErrorType.OutOfMemoryError,
                                                               ErrorType.NCCLTimeoutError, ErrorType.ChildFailedError}
    assert 0 < v.confidence <= 1 and abs(sum(v.probabilities.values()) - 1) < 1e-3
    assert ref.diagnosis.decided_by.value in {"rules", "llm"}
    stats = agent.client.calls.totals()
    assert stats["calls"] == 3 and stats["tokens_in"] > 0  # content-free prior + two candidate orders
