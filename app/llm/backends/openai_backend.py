"""Any OpenAI-compatible chat-completions server (OpenAI, vLLM, llama.cpp server, Ollama, ...).

Retries are ours, not the client's: 429/5xx/timeouts/dropped connections are retried with
exponential backoff that honours `Retry-After` (capped); a semaphore bounds concurrent calls.
Structured output uses `response_format: json_schema`; when the server rejects that, the answer
is parsed strictly and, if it does not parse/validate, one repair turn is sent.
"""

from __future__ import annotations

import email.utils
import json
import random
import threading
import time
from dataclasses import dataclass
from typing import Any

from pydantic import SecretStr

from app.llm.backends.base import ChoiceScores, JSONAnswer, Usage, approx_tokens
from app.llm.errors import (
    BackendUnavailable, LLMBadResponse, LLMConnectionError, LLMError, LLMRateLimited, LLMServerError,
    LLMTimeout,
)


@dataclass
class OpenAIConfig:
    base_url: str | None = None
    model: str = "gpt-4o-mini"
    api_key: SecretStr | str | None = None
    timeout_s: float = 30.0
    retries: int = 2  # extra attempts after the first, for retryable errors
    backoff_s: float = 0.5  # first backoff; doubles per attempt, with jitter
    max_backoff_s: float = 20.0  # a Retry-After longer than this is not waited for
    max_concurrency: int = 4
    structured_output: bool = True  # send response_format json_schema (falls back if rejected)
    context_tokens: int = 16384
    max_output_tokens: int = 800
    temperature: float = 0.0
    # llama.cpp/llguidance: forbid free whitespace between JSON tokens, or a small model can
    # pad an answer with newlines until max_tokens. Other servers may reject the extension.
    strict_whitespace: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.api_key, str):
            self.api_key = SecretStr(self.api_key)


def _retry_after(headers: Any) -> float | None:
    if headers is None:
        return None
    raw = headers.get("retry-after-ms")
    if raw:
        try:
            return float(raw) / 1000
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(raw) if raw else None
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


def _validate(data: Any, schema: dict[str, Any]) -> str | None:
    """None when `data` satisfies `schema`, else a short reason (fed back in the repair turn)."""
    if not isinstance(data, dict):
        return "the answer must be a JSON object"
    try:
        import jsonschema_rs
    except ImportError:  # required keys only; callers validate fully with pydantic anyway
        missing = [k for k in schema.get("required", []) if k not in data]
        return f"missing keys {missing}" if missing else None
    try:
        jsonschema_rs.validate(schema, data)
    except jsonschema_rs.ValidationError as exc:
        return str(exc).splitlines()[0][:300]
    return None


def _parse_json(text: str) -> Any:
    """Strict: the whole answer is one JSON value; a ```json fence around it is tolerated."""
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.rsplit("```", 1)[0]
    return json.loads(body)


class OpenAIBackend:
    name = "openai"
    supports_json = True
    hosted = True

    def __init__(self, config: OpenAIConfig) -> None:
        try:
            import openai
        except ImportError as exc:  # pragma: no cover - openai is a core dependency
            raise BackendUnavailable("the openai package is not installed") from exc
        self.config = config
        self.model = config.model
        self.context_tokens = config.context_tokens
        key = config.api_key.get_secret_value() if isinstance(config.api_key, SecretStr) else None
        self._openai = openai
        self._client = openai.OpenAI(api_key=key or "not-needed", base_url=config.base_url,
                                     timeout=config.timeout_s, max_retries=0)
        self._slots = threading.BoundedSemaphore(max(1, config.max_concurrency))
        self._structured = config.structured_output
        self.sleep = time.sleep  # tests replace it to observe backoff without waiting

    # -- the Protocol ------------------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        return approx_tokens(text)

    def complete_json(self, prompt: str, schema: dict[str, Any], *, system: str | None = None) -> JSONAnswer:
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": prompt}]
        usage = Usage()
        content = self._chat(messages, schema, usage)
        try:
            data = _parse_json(content)
            problem = _validate(data, schema)
        except (json.JSONDecodeError, ValueError) as exc:
            data, problem = None, f"not valid JSON ({exc})"
        if problem is None:
            return JSONAnswer(data, usage)
        repair = messages + [
            {"role": "assistant", "content": content[:4000]},
            {"role": "user", "content": f"That answer is invalid: {problem}. Reply with only a JSON object "
                                        f"that satisfies this JSON schema, nothing else:\n{json.dumps(schema)}"}]
        content = self._chat(repair, schema, usage)
        try:
            data = _parse_json(content)
        except (json.JSONDecodeError, ValueError) as exc:
            raise LLMBadResponse(f"answer is not valid JSON after one repair: {exc}") from None
        problem = _validate(data, schema)
        if problem is not None:
            raise LLMBadResponse(f"answer does not match the schema after one repair: {problem}")
        return JSONAnswer(data, usage, repaired=True)

    def score_choices(self, prompt: str, choices: list[str], *, system: str | None = None) -> ChoiceScores:
        """Hosted chat APIs do not reliably expose log-likelihoods: ask for the choice and a
        confidence, and spread the rest of the mass evenly over the other choices."""
        schema = {"type": "object", "additionalProperties": False, "required": ["choice", "confidence"],
                  "properties": {"choice": {"type": "string", "enum": list(choices)},
                                 "confidence": {"type": "number", "minimum": 0, "maximum": 1}}}
        answer = self.complete_json(prompt + "\nAnswer with JSON {\"choice\": ..., \"confidence\": 0..1}.",
                                    schema, system=system)
        conf = float(answer.data["confidence"])
        rest = (1 - conf) / (len(choices) - 1) if len(choices) > 1 else 0.0
        probs = [conf if c == answer.data["choice"] else rest for c in choices]
        import math

        return ChoiceScores([math.log(max(p, 1e-9)) for p in probs], probs, answer.usage)

    # -- transport ----------------------------------------------------------------------------
    def _chat(self, messages: list[dict], schema: dict[str, Any], usage: Usage) -> str:
        kwargs: dict[str, Any] = {"model": self.config.model, "messages": messages,
                                  "temperature": self.config.temperature,
                                  "max_tokens": self.config.max_output_tokens}
        if self._structured:
            sent = {**schema, "x-guidance": {"whitespace_flexible": False}} if self.config.strict_whitespace else schema
            kwargs["response_format"] = {"type": "json_schema",
                                         "json_schema": {"name": "answer", "schema": sent, "strict": True}}
        try:
            resp = self._call_with_retries(kwargs)
        except LLMBadResponse:
            raise
        except _StructuredRejected:
            self._structured = False  # remember: this server does not take json_schema
            kwargs.pop("response_format", None)
            resp = self._call_with_retries(kwargs)
        if resp.usage is not None:
            usage.tokens_in += resp.usage.prompt_tokens or 0
            usage.tokens_out += resp.usage.completion_tokens or 0
        else:
            usage.tokens_in += sum(self.count_tokens(m["content"]) for m in messages)
        try:
            content = resp.choices[0].message.content
            finish = resp.choices[0].finish_reason
        except (AttributeError, IndexError, TypeError):
            raise LLMBadResponse("response has no choices[0].message.content") from None
        if not isinstance(content, str):
            raise LLMBadResponse("response content is empty")
        if finish == "length":
            # a cut answer is not repaired: the repair turn would be cut at the same limit
            raise LLMBadResponse(f"answer cut at max_tokens ({self.config.max_output_tokens}) "
                                 f"after {len(content)} characters")
        if resp.usage is None:
            usage.tokens_out += self.count_tokens(content)
        return content

    def _call_with_retries(self, kwargs: dict[str, Any]) -> Any:
        openai = self._openai
        attempt = 0
        while True:
            try:
                with self._slots:
                    return self._client.chat.completions.create(**kwargs)
            except openai.BadRequestError as exc:
                if "response_format" in kwargs and exc.status_code in (400, 422):
                    raise _StructuredRejected() from None
                raise LLMBadResponse(f"server rejected the request ({exc.status_code})") from None
            except openai.RateLimitError as exc:
                err: LLMError = LLMRateLimited("rate limited (429)", _retry_after(exc.response.headers))
            except openai.APITimeoutError:
                err = LLMTimeout(f"no answer within {self.config.timeout_s}s")
            except openai.APIConnectionError as exc:
                err = LLMConnectionError(f"connection failed: {type(exc.__cause__ or exc).__name__}")
            except openai.APIStatusError as exc:
                if exc.status_code >= 500 or exc.status_code in (408, 409):
                    err = LLMServerError(f"server error {exc.status_code}")
                    err.retry_after = _retry_after(exc.response.headers)  # type: ignore[attr-defined]
                else:
                    raise LLMBadResponse(f"server refused the request ({exc.status_code})") from None
            except openai.APIResponseValidationError:
                raise LLMBadResponse("response body is not a chat completion") from None
            except (ValueError, json.JSONDecodeError):
                raise LLMBadResponse("response body is not JSON") from None
            if attempt >= self.config.retries:
                raise err
            delay = min(self.config.max_backoff_s, self.config.backoff_s * 2 ** attempt)
            delay *= 0.75 + random.random() / 2
            hinted = getattr(err, "retry_after", None)
            if hinted is not None:
                if hinted > self.config.max_backoff_s:
                    raise err  # the server asks for longer than we may wait: fail now, fall back
                delay = max(hinted, 0.0)
            attempt += 1
            self.sleep(delay)


class _StructuredRejected(Exception):
    pass
