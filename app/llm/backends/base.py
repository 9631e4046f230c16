"""The backend Protocol: every LLM (hosted, local, fake) is used through these four calls."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass
class Usage:
    tokens_in: int = 0
    tokens_out: int = 0


@dataclass
class JSONAnswer:
    data: dict[str, Any]
    usage: Usage = field(default_factory=Usage)
    repaired: bool = False  # the first answer failed to parse/validate and the repair retry fixed it


@dataclass
class ChoiceScores:
    """Log-likelihood of each choice (same order as asked) and the softmax over them."""

    logprobs: list[float]
    probs: list[float]
    usage: Usage = field(default_factory=Usage)


@runtime_checkable
class LLMBackend(Protocol):
    name: str  # registry name: "openai" | "transformers" | "none" | "fake"
    model: str
    # False for local scoring models: they never free-write; callers must use score_choices
    supports_json: bool
    context_tokens: int  # the model's context window, the budget prompts must fit in
    hosted: bool  # the prompt leaves this machine (masking is on by default when true)

    def complete_json(self, prompt: str, schema: dict[str, Any], *, system: str | None = None) -> JSONAnswer:
        """An answer that parses as JSON and validates against `schema` (or raises LLMBadResponse)."""

    def score_choices(self, prompt: str, choices: list[str], *, system: str | None = None) -> ChoiceScores:
        """How likely each choice is as the answer to `prompt`."""

    def count_tokens(self, text: str) -> int:
        """Tokens `text` takes in this model's tokenizer (an upper-bound estimate if none is available)."""


def softmax(values: list[float]) -> list[float]:
    if not values:
        return []
    top = max(values)
    import math

    exps = [math.exp(v - top) for v in values]
    total = sum(exps)
    return [e / total for e in exps]


def approx_tokens(text: str) -> int:
    """A conservative estimate for tokenizers we cannot run offline: logs tokenize densely
    (numbers, hex, punctuation), so ~3 characters per token rather than the usual 4."""
    return max(1, (len(text) + 2) // 3)
