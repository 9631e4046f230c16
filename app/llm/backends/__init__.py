"""Backend registry: a name picks a backend class; an unknown name raises (no silent default)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.llm.backends.base import ChoiceScores, JSONAnswer, LLMBackend, Usage
from app.llm.errors import UnknownBackendError


def _none(**_: Any) -> LLMBackend:
    from app.llm.backends.none import NoneBackend

    return NoneBackend()


def _openai(**kwargs: Any) -> LLMBackend:
    from app.llm.backends.openai_backend import OpenAIBackend, OpenAIConfig

    return OpenAIBackend(OpenAIConfig(**kwargs))


def _transformers(**kwargs: Any) -> LLMBackend:
    from app.llm.backends.transformers_backend import TransformersBackend, TransformersConfig

    return TransformersBackend(TransformersConfig(**kwargs))


def _fake(**kwargs: Any) -> LLMBackend:
    from app.llm.backends.fake import FakeBackend

    return FakeBackend(**kwargs)


REGISTRY: dict[str, Callable[..., LLMBackend]] = {
    "none": _none,
    "openai": _openai,
    "transformers": _transformers,
    "fake": _fake,
}


def create_backend(name: str, **options: Any) -> LLMBackend:
    """Build the backend registered as `name` with its options (see each backend's *Config)."""
    key = str(getattr(name, "value", name)).strip().lower()
    factory = REGISTRY.get(key)
    if factory is None:
        raise UnknownBackendError(f"unknown LLM backend {name!r}; known: {sorted(REGISTRY)}")
    return factory(**options)


__all__ = ["REGISTRY", "ChoiceScores", "JSONAnswer", "LLMBackend", "Usage", "create_backend"]
