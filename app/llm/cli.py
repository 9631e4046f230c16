"""`logdx llm ...`: the offline OpenAI-compatible endpoint for the failure agent."""

from __future__ import annotations

import sys

import click


@click.group()
def llm() -> None:
    """The local LLM endpoint (llama.cpp server with the packaged model)."""


@llm.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option("--port", default=8088, show_default=True, type=click.IntRange(1, 65535))
@click.option("--model", "model_path", type=click.Path(dir_okay=False, exists=True), default=None,
              help="A GGUF file (default: the packaged Gemma 3 270M).")
@click.option("--ctx", "context_tokens", default=4096, show_default=True, type=click.IntRange(512, 131072),
              help="Context tokens per request slot.")
@click.option("--parallel", default=2, show_default=True, type=click.IntRange(1, 64),
              help="Requests served at once.")
@click.option("--threads", default=0, type=click.IntRange(0, 1024), help="CPU threads (0: all cores).")
@click.option("--prompts-log-dir", type=click.Path(file_okay=False), default=None,
              help="Write every prompt the server receives to this folder (audit what leaves logdx).")
def serve(host: str, port: int, model_path: str | None, context_tokens: int, parallel: int, threads: int,
          prompts_log_dir: str | None) -> None:
    """Serve /v1/chat/completions on HOST:PORT until interrupted.

    Then: LOGDX_LLM_BACKEND=openai LOGDX_LLM_BASE_URL=http://HOST:PORT/v1 LOGDX_LLM_MODEL=gemma-3-270m
    """
    from app.llm.local_server import LocalServerConfig, LocalServerUnavailable, serve as run

    config = LocalServerConfig(host=host, port=port, model_path=model_path, context_tokens=context_tokens,
                               parallel=parallel, threads=threads, prompts_log_dir=prompts_log_dir)
    try:
        click.echo(f"logdx llm: serving {config.alias} on http://{host}:{port}/v1 (Ctrl-C stops)", err=True)
        run(config)
    except LocalServerUnavailable as exc:
        click.echo(f"logdx: {exc}", err=True)
        sys.exit(2)
