"""The openai backend against a protocol fake of an OpenAI-compatible server on 127.0.0.1."""

import json

import pytest

from app.llm.agent import AgentConfig, FailureAgent
from app.llm.backends import create_backend
from app.llm.client import LLMClient
from app.llm.errors import LLMBadResponse, LLMConnectionError, LLMRateLimited, LLMTimeout
from app.core.types import DecidedBy, ErrorType

from tests.llm.test_masking_cache_breaker import PRIVATE, SECRETS

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["x"], "properties": {"x": {"type": "integer"}}}


def backend(server, **kw):
    opts = dict(base_url=server.base_url, model="fake-model", api_key="sk-test-0000000000000000000000",
                timeout_s=2.0, retries=2, backoff_s=0.01)
    opts.update(kw)
    b = create_backend("openai", **opts)
    b.sleeps = []
    b.sleep = b.sleeps.append  # observe backoff without waiting
    return b


def test_structured_output_request_and_usage(fake_openai):
    fake_openai.script = [{"json": {"x": 3}}]
    b = backend(fake_openai)
    ans = b.complete_json("hi", SCHEMA, system="sys")
    assert ans.data == {"x": 3} and ans.usage.tokens_in == 100 and ans.usage.tokens_out == 20
    req = fake_openai.requests[0]
    assert req["response_format"]["type"] == "json_schema"
    assert req["response_format"]["json_schema"]["schema"] == SCHEMA
    assert req["messages"][0] == {"role": "system", "content": "sys"}


def test_429_with_retry_after_is_honoured(fake_openai):
    fake_openai.script = [{"status": 429, "headers": {"Retry-After": "3"}}, {"json": {"x": 1}}]
    b = backend(fake_openai, max_backoff_s=5)
    assert b.complete_json("hi", SCHEMA).data == {"x": 1}
    assert b.sleeps == [3.0]


def test_429_with_too_long_retry_after_fails_fast(fake_openai):
    fake_openai.script = [{"status": 429, "headers": {"Retry-After": "120"}}]
    b = backend(fake_openai, max_backoff_s=5)
    with pytest.raises(LLMRateLimited):
        b.complete_json("hi", SCHEMA)
    assert len(fake_openai.requests) == 1 and b.sleeps == []


def test_5xx_retried_with_backoff_then_gives_up(fake_openai):
    fake_openai.script = [{"status": 503}]
    b = backend(fake_openai, retries=2)
    with pytest.raises(Exception) as exc:
        b.complete_json("hi", SCHEMA)
    assert type(exc.value).__name__ == "LLMServerError"
    assert len(fake_openai.requests) == 3 and len(b.sleeps) == 2 and b.sleeps[1] > b.sleeps[0] * 1.2


def test_timeout(fake_openai):
    fake_openai.script = [{"sleep": 1.0, "json": {"x": 1}}]
    b = backend(fake_openai, timeout_s=0.2, retries=0)
    with pytest.raises(LLMTimeout):
        b.complete_json("hi", SCHEMA)


def test_dropped_connection(fake_openai):
    fake_openai.script = [{"drop": True}]
    b = backend(fake_openai, retries=1)
    with pytest.raises(LLMConnectionError):
        b.complete_json("hi", SCHEMA)
    assert len(fake_openai.requests) == 2


def test_dead_endpoint():
    b = create_backend("openai", base_url="http://127.0.0.1:9/v1", model="m", timeout_s=0.5, retries=0)
    with pytest.raises(LLMConnectionError):
        b.complete_json("hi", SCHEMA)


def test_malformed_json_gets_one_repair_turn(fake_openai):
    fake_openai.script = [{"content": "Sure! here: {x: 1"}, {"content": '```json\n{"x": 2}\n```'}]
    b = backend(fake_openai)
    ans = b.complete_json("hi", SCHEMA)
    assert ans.data == {"x": 2} and ans.repaired
    repair = fake_openai.requests[1]["messages"]
    assert repair[-2]["role"] == "assistant" and "invalid" in repair[-1]["content"]


def test_malformed_json_twice_is_a_bad_response(fake_openai):
    fake_openai.script = [{"content": "nope"}, {"content": '{"x": "not an int"}'}]
    with pytest.raises(LLMBadResponse):
        backend(fake_openai).complete_json("hi", SCHEMA)


def test_garbage_http_body(fake_openai):
    fake_openai.script = [{"body": "<html>gateway</html>"}]
    with pytest.raises(LLMBadResponse):
        backend(fake_openai, retries=0).complete_json("hi", SCHEMA)


def test_server_without_json_schema_support_falls_back_to_plain(fake_openai):
    fake_openai.script = [{"status": 400}, {"json": {"x": 5}}]
    b = backend(fake_openai)
    assert b.complete_json("hi", SCHEMA).data == {"x": 5}
    assert "response_format" not in fake_openai.requests[1]


def _answer(choice="e1", etype="OutOfMemoryError", lines=(95,), conf=0.9, expl="OOM at line 95 on <HOST_1> first"):
    return {"choice": choice, "error_type": etype, "category": "framework", "action": "no_retry",
            "confidence": conf, "explanation": expl, "evidence_lines": list(lines)}


def test_agent_over_http_masks_everything_private_and_restores_answer(fake_openai, oom_result):
    # secrets and private values planted in the log must never reach the server
    planted = "\n".join(f" L{5 + i}: {line}" for i, line in enumerate(SECRETS.values()))
    oom_result.compressed.text = oom_result.compressed.text.replace(" L40-90", planted + "\n L40-90")
    fake_openai.script = [{"json": _answer()}]
    client = LLMClient(backend(fake_openai))
    assert client.mask  # on by default for hosted backends
    agent = FailureAgent(client, config=AgentConfig(max_log_tokens=5000))
    diag = agent.refine(oom_result)
    body = b"".join(fake_openai.raw_bodies).decode()
    for value in PRIVATE + ["sk-proj-AbCdEfGhIjKlMnOpQrStUvWx123456", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123",
                            "AKIAIOSFODNN7EXAMPLE", "Hunter2Secret!", "SuperSecretPw",
                            "0123456789abcdef0123456789abcdef01234567", "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
                            "jane.doe@example.com", "sk-test-0000000000000000000000"]:
        assert value not in body, value
        assert json.dumps(value)[1:-1] not in body, value
    assert "OutOfMemoryError" in body  # the content needed for the diagnosis is still there
    assert diag.decided_by is DecidedBy.LLM
    assert diag.root_cause.error_type is ErrorType.OutOfMemoryError
    assert "node-12" in diag.root_cause.explanation  # placeholder restored in the answer


def test_agent_survives_every_failure_mode(fake_openai, oom_result):
    for script in ([{"status": 500}], [{"drop": True}], [{"content": "garbage"}],
                   [{"status": 429, "headers": {"Retry-After": "999"}}]):
        fake_openai.script = list(script)
        agent = FailureAgent(LLMClient(backend(fake_openai, retries=1)))
        diag = agent.refine(oom_result)
        assert diag.decided_by is DecidedBy.RULES
        assert diag.root_cause == oom_result.diagnosis.root_cause
        assert any("llm unavailable" in n for n in diag.notes), diag.notes
