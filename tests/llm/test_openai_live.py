"""The openai backend against a real OpenAI-compatible server: llama.cpp (xllamacpp) serving the
packaged Gemma 3 270M base model. These tests check the protocol, the schema and our handling
of what a real server does (cut answers, slowness, a crash mid-request, what it receives), never
the wisdom of a 270M base model's answers. 429 with Retry-After stays with the protocol fake
(test_openai_backend.py): a real server cannot produce it on demand."""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path

import pytest

from app.llm.backends.openai_backend import OpenAIBackend, OpenAIConfig
from app.llm.client import LLMClient
from app.llm.errors import LLMBadResponse, LLMTimeout
from app.llm.prompts import load_prompt
from tests.llm.live_server import LiveServer, start_server, stop_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def live(tmp_path_factory) -> LiveServer:
    url = os.environ.get("LOGDX_TEST_LLM_URL")
    if url:
        yield LiveServer(url, Path(os.environ["LOGDX_TEST_LLM_PROMPTS_DIR"]))
        return
    server = start_server(tmp_path_factory.mktemp("llm-prompts"))
    yield server
    stop_server(server)


def backend(server: LiveServer, **kw) -> OpenAIBackend:
    cfg = dict(base_url=server.url, model="gemma-3-270m", timeout_s=60, retries=0,
               strict_whitespace=True, max_output_tokens=256)
    cfg.update(kw)
    return OpenAIBackend(OpenAIConfig(**cfg))


SMALL_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["error_type", "note"],
                "properties": {"error_type": {"type": "string", "enum": ["ECCError", "OutOfMemoryError"]},
                               "note": {"type": "string", "maxLength": 60}}}


def test_answers_satisfy_the_agents_real_schema(live):
    prompt = load_prompt("root_cause")
    system, user = prompt.render(
        job_context="8 ranks", error_types="ECCError, NCCLTimeoutError",
        candidates="e1 | ECCError | cause | L12 | ×1 | RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
                   "e2 | NCCLTimeoutError | symptom | L40 | ×7 | Watchdog caught collective operation timeout",
        similar_cases="(none)",
        log="L12: [rank3]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
            "L40: [rank0]: Watchdog caught collective operation timeout")
    answer = backend(live).complete_json(user, prompt.output_schema, system=system)
    data = answer.data
    assert set(prompt.output_schema["required"]) <= set(data)
    assert data["category"] in {"infrastructure", "framework", "script", "unknown"}
    assert 0 <= data["confidence"] <= 1 and all(isinstance(x, int) for x in data["evidence_lines"])
    assert len(data["explanation"]) <= 800
    assert answer.usage.tokens_in > 0 and answer.usage.tokens_out > 0


def test_enum_and_max_length_are_enforced_by_the_server(live):
    answer = backend(live).complete_json("Which error is 'uncorrectable ECC error'? Reply in JSON.", SMALL_SCHEMA)
    assert answer.data["error_type"] in {"ECCError", "OutOfMemoryError"}
    assert len(answer.data["note"]) <= 60 and not answer.repaired


def test_answer_cut_at_max_tokens_is_a_clear_error_not_a_repair(live):
    schema = {"type": "object", "required": ["story"], "properties": {"story": {"type": "string"}}}
    with pytest.raises(LLMBadResponse, match="cut at max_tokens"):
        backend(live, max_output_tokens=6).complete_json("Write a long story about GPUs as JSON.", schema)


def test_timeout_is_reported_after_the_configured_retries(live):
    b = backend(live, timeout_s=0.05, retries=1, backoff_s=0.01, max_output_tokens=200)
    started = time.monotonic()
    with pytest.raises(LLMTimeout):
        b.complete_json("Write a long story about GPUs as JSON " + uuid.uuid4().hex, SMALL_SCHEMA)
    assert time.monotonic() - started < 10


def test_masking_applies_to_what_the_server_receives(live):
    marker = uuid.uuid4().hex
    client = LLMClient(backend(live))
    assert client.mask, "masking is on by default for the openai backend"
    secret = "sk-live-" + uuid.uuid4().hex
    text = (f"{marker} [rank3] node-17.cluster.local (10.1.2.3) api_key={secret} "
            f"/home/alice/runs/llama/ckpt failed: uncorrectable ECC error. Reply in JSON.")
    client.complete_json(text, SMALL_SCHEMA, prompt_version="test/v1", known_hosts={"node-17.cluster.local"})
    received = live.prompts_containing(marker)
    assert len(received) == 1
    for leaked in (secret, "node-17", "10.1.2.3", "alice"):
        assert leaked not in received[0]
    assert "uncorrectable ECC error" in received[0]


def test_identical_concurrent_calls_reach_the_server_once(live):
    marker = uuid.uuid4().hex
    client = LLMClient(backend(live))
    results, barrier = [], threading.Barrier(3)

    def call():
        barrier.wait()
        results.append(client.complete_json(f"{marker}: classify 'CUDA out of memory'. JSON.", SMALL_SCHEMA,
                                            prompt_version="test/v1").data)

    threads = [threading.Thread(target=call) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(results) == 3 and all(r == results[0] for r in results)
    assert len(live.prompts_containing(marker)) == 1
    totals = client.calls.totals()
    assert totals["calls"] == 1 and totals["cached"] == 2


def test_concurrency_limit_holds_against_the_server(tmp_path):
    server = start_server(tmp_path / "prompts", parallel=4)
    try:
        b = backend(server, max_concurrency=1, max_output_tokens=48)
        peak, stop = [0.0], threading.Event()

        def watch():
            while not stop.is_set():
                peak[0] = max(peak[0], server.metric("llamacpp:requests_processing")
                              + server.metric("llamacpp:requests_deferred"))
                time.sleep(0.05)

        watcher = threading.Thread(target=watch)
        watcher.start()
        calls = [threading.Thread(target=b.complete_json, args=(f"story {i} {uuid.uuid4().hex} as JSON", SMALL_SCHEMA))
                 for i in range(3)]
        for t in calls:
            t.start()
        for t in calls:
            t.join(120)
        stop.set()
        watcher.join()
        assert len(list((tmp_path / "prompts").glob("*.txt"))) == 3
        assert peak[0] <= 1
    finally:
        stop_server(server)


def test_retries_when_the_server_is_killed_mid_request(tmp_path):
    server = start_server(tmp_path / "p1")
    port = server.port
    b = backend(server, retries=8, backoff_s=0.5, max_backoff_s=4, timeout_s=60, max_output_tokens=200)
    out: dict = {}

    def call():
        try:
            out["answer"] = b.complete_json("Tell a long story about a GPU cluster, as JSON. " + uuid.uuid4().hex,
                                            SMALL_SCHEMA)
        except Exception as exc:  # noqa: BLE001 - recorded for the assertion
            out["error"] = exc

    t = threading.Thread(target=call)
    t.start()
    deadline = time.monotonic() + 30
    while server.metric("llamacpp:requests_processing") < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    stop_server(server, hard=True)  # SIGKILL while the request is being decoded
    restarted = start_server(tmp_path / "p2", port=port)
    try:
        t.join(180)
        assert "error" not in out, out.get("error")
        assert out["answer"].data["error_type"] in {"ECCError", "OutOfMemoryError"}
        assert len(list((tmp_path / "p2").glob("*.txt"))) >= 1  # answered by the new server
    finally:
        stop_server(restarted)
