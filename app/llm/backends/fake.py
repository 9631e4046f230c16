"""A scripted backend for tests: answers come from a function of the prompt, calls are recorded."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.llm.backends.base import ChoiceScores, JSONAnswer, Usage, approx_tokens, softmax


class FakeBackend:
    name = "fake"
    hosted = False

    def __init__(self, *, json_answer: Callable[[str, dict], dict] | dict | None = None,
                 choice_scores: Callable[[str, list[str]], list[float]] | None = None,
                 model: str = "fake-1", supports_json: bool = True, context_tokens: int = 8192,
                 hosted: bool = False) -> None:
        self.model = model
        self.supports_json = supports_json
        self.context_tokens = context_tokens
        self.hosted = hosted
        self._json = json_answer
        self._scores = choice_scores
        self.prompts: list[str] = []

    def complete_json(self, prompt: str, schema: dict[str, Any], *, system: str | None = None) -> JSONAnswer:
        self.prompts.append(prompt)
        if self._json is None:
            raise AssertionError("FakeBackend has no json_answer")
        data = self._json(prompt, schema) if callable(self._json) else dict(self._json)
        return JSONAnswer(data, Usage(self.count_tokens(prompt), 20))

    def score_choices(self, prompt: str, choices: list[str], *, system: str | None = None) -> ChoiceScores:
        self.prompts.append(prompt)
        scores = self._scores(prompt, choices) if self._scores else [0.0] * len(choices)
        return ChoiceScores(scores, softmax(scores), Usage(self.count_tokens(prompt), len(choices)))

    def count_tokens(self, text: str) -> int:
        return approx_tokens(text)
