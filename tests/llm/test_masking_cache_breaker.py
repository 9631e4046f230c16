import threading
import time

import pytest

from app.llm.backends.fake import FakeBackend
from app.llm.breaker import CircuitBreaker
from app.llm.cache import ResponseCache
from app.llm.client import LLMClient
from app.llm.errors import CircuitOpenError, LLMServerError
from app.llm.masking import Masker

SECRETS = {
    "openai key": "OPENAI_API_KEY=sk-proj-AbCdEfGhIjKlMnOpQrStUvWx123456",
    "hf token": "HF_TOKEN: hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123",
    "github": "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "aws": "aws_access_key_id=AKIAIOSFODNN7EXAMPLE",
    "password": "db password=Hunter2Secret!",
    "bearer": "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
    "url creds": "s3://bob:SuperSecretPw@minio.internal:9000/bucket",
    "wandb": "WANDB_API_KEY=0123456789abcdef0123456789abcdef01234567",
    "email": "contact jane.doe@example.com",
}
PRIVATE = ["10.1.2.3", "node-12", "gpu-node-07.cluster.local", "alice", "/home/alice/proj", "/mnt/secret-team/ckpt",
           "fe80::1ff:fe23:4567:890a"]


def test_masker_replaces_and_restores_private_values():
    text = ("launch on node-12 ip 10.1.2.3 and gpu-node-07.cluster.local; user=alice\n"
            "File \"/home/alice/proj/train.py\" and /mnt/secret-team/ckpt/step_100.pt; link fe80::1ff:fe23:4567:890a\n"
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError")
    masked, m = Masker().mask(text, known_hosts={"node-12"})
    for value in PRIVATE:
        assert value not in masked, value
    assert "torch.distributed.elastic.multiprocessing.errors.ChildFailedError" in masked  # code is not a host
    assert "train.py" in masked and "step_100.pt" in masked  # file names stay: they explain failures
    assert m.restore(masked) == text


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_secrets_are_masked_and_never_restored(name):
    secret_line = SECRETS[name]
    masked, m = Masker().mask(f"prefix {secret_line} suffix")
    secret_value = secret_line.split("=", 1)[-1].split(": ", 1)[-1].split("Bearer ")[-1]
    if name == "url creds":
        secret_value = "SuperSecretPw"
    if name == "email":
        secret_value = "jane.doe@example.com"
    assert secret_value not in masked
    assert secret_value not in m.restore(masked) or name == "email"


def test_cache_key_includes_model_and_prompt_version():
    backend = FakeBackend(json_answer={"a": 1})
    client = LLMClient(backend)
    client.complete_json("p", {}, prompt_version="t/v1")
    client.complete_json("p", {}, prompt_version="t/v1")
    assert len(backend.prompts) == 1
    client.complete_json("p", {}, prompt_version="t/v2")
    backend.model = "fake-2"
    client.complete_json("p", {}, prompt_version="t/v1")
    assert len(backend.prompts) == 3
    totals = client.calls.totals()
    assert totals["calls"] == 3 and totals["cached"] == 1 and totals["tokens_in"] > 0


def test_identical_in_flight_requests_are_coalesced():
    calls = []

    def slow(prompt, schema):
        calls.append(prompt)
        time.sleep(0.3)
        return {"ok": True}

    client = LLMClient(FakeBackend(json_answer=slow))
    results = []
    threads = [threading.Thread(target=lambda: results.append(client.complete_json("same", {}, prompt_version="v")))
               for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(results) == 5
    assert client.cache.coalesced == 4


def test_failures_are_not_cached_and_waiters_see_the_error():
    cache = ResponseCache()
    with pytest.raises(LLMServerError):
        cache.get_or_compute("k", lambda: (_ for _ in ()).throw(LLMServerError("500")))
    assert cache.get_or_compute("k", lambda: 42) == (42, False)


def test_circuit_breaker_opens_then_half_opens():
    now = [0.0]
    br = CircuitBreaker(failures=2, cooldown_s=10, clock=lambda: now[0])

    def boom(prompt, schema):
        raise LLMServerError("500")

    client = LLMClient(FakeBackend(json_answer=boom), breaker=br)
    for i in range(2):
        with pytest.raises(LLMServerError):
            client.complete_json(f"p{i}", {}, prompt_version="v")
    assert br.state == "open"
    with pytest.raises(CircuitOpenError):
        client.complete_json("p3", {}, prompt_version="v")
    now[0] = 11
    assert br.state == "half_open"
    client.backend._json = {"ok": 1}
    assert client.complete_json("p4", {}, prompt_version="v").data == {"ok": 1}
    assert br.state == "closed"
