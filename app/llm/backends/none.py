"""`none`: rules only. Every call raises BackendUnavailable, so callers take the rules path."""

from __future__ import annotations

from typing import Any

from app.llm.backends.base import ChoiceScores, JSONAnswer, approx_tokens
from app.llm.errors import BackendUnavailable


class NoneBackend:
    name = "none"
    model = "none"
    supports_json = False
    context_tokens = 0
    hosted = False

    def complete_json(self, prompt: str, schema: dict[str, Any], *, system: str | None = None) -> JSONAnswer:
        raise BackendUnavailable("LLM backend is 'none' (rules only)")

    def score_choices(self, prompt: str, choices: list[str], *, system: str | None = None) -> ChoiceScores:
        raise BackendUnavailable("LLM backend is 'none' (rules only)")

    def count_tokens(self, text: str) -> int:
        return approx_tokens(text)
