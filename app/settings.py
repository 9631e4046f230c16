"""The one settings class of logdx. Every field is read from the environment with the
`LOGDX_` prefix (e.g. `LOGDX_DATA_DIR`) and must carry a description (a test checks)."""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_data_dir() -> Path:
    xdg = os.environ.get("XDG_DATA_HOME")
    if xdg:
        return Path(xdg) / "logdx"
    home = Path.home()
    if home.is_dir() and os.access(home, os.W_OK):
        return home / ".local" / "share" / "logdx"
    return Path("data").resolve()


class LLMBackendName(StrEnum):
    NONE = "none"
    OPENAI = "openai"
    TRANSFORMERS = "transformers"


class DiagnosisExecutor(StrEnum):
    PROCESS = "process"
    THREAD = "thread"


class ControllerScheduler(StrEnum):
    LOCAL = "local"
    SLURM = "slurm"
    KUBERNETES = "kubernetes"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LOGDX_", extra="ignore")

    data_dir: Path = Field(
        default_factory=_default_data_dir,
        description="Directory for raw log blobs, upload spools and the default SQLite database "
        "(default: $XDG_DATA_HOME/logdx, else ~/.local/share/logdx, else ./data).",
    )
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL of the store. Unset: SQLite file `logdx.db` in the data dir "
        "(WAL mode). `postgresql+psycopg://...` switches background diagnoses to procrastinate.",
    )
    llm_backend: LLMBackendName = Field(
        default=LLMBackendName.NONE,
        description="LLM used when rules are unsure: none | openai (any OpenAI-compatible server) "
        "| transformers (local model).",
    )
    llm_base_url: str | None = Field(
        default=None, description="Base URL of the OpenAI-compatible server (openai backend)."
    )
    llm_model: str | None = Field(
        default=None, description="Model name (openai backend) or local model id/path (transformers)."
    )
    llm_api_key: SecretStr | None = Field(
        default=None, description="API key for the OpenAI-compatible server; never logged or echoed."
    )
    llm_timeout_s: float = Field(
        default=30.0, gt=0, le=600,
        description="Seconds one LLM request may take before it counts as failed (openai backend).",
    )
    llm_max_retries: int = Field(
        default=2, ge=0, le=10,
        description="Extra attempts after a retryable LLM failure (429, 5xx, timeout, dropped "
        "connection), with exponential backoff that honours Retry-After.",
    )
    llm_concurrency: int = Field(
        default=4, ge=1, le=256,
        description="Concurrent LLM requests per worker process (a semaphore around the backend).",
    )
    llm_mask: bool | None = Field(
        default=None,
        description="Redact hosts, IPs, users, paths and secrets before a prompt leaves the process "
        "(restored in answers, secrets never). Unset: on for hosted backends (openai), off for "
        "local ones (transformers).",
    )
    llm_strict_whitespace: bool = Field(
        default=False,
        description="Send llguidance's `x-guidance: {whitespace_flexible: false}` with the JSON "
        "schema (llama.cpp servers such as `logdx llm serve`): a small model cannot pad an answer "
        "with whitespace until max_tokens. Leave off for servers that reject the extension.",
    )
    llm_cache_dir: Path | None = Field(
        default=None,
        description="Where the transformers backend keeps local model weights (the de-quantized "
        "packaged model). Unset: $XDG_CACHE_HOME/logdx/models, else ~/.cache/logdx/models.",
    )
    llm_trigger_below: float = Field(
        default=0.8, ge=0.0, le=1.0,
        description="Ranking confidence under which the LLM agent is consulted (it is also consulted "
        "when nothing matched, error type Unknown); 0 consults it for Unknown only. 0.8: on the "
        "development set a capable model asked below 0.8 instead of 0.6 corrected 5 more families "
        "for 19 more requests in 346 (docs/LLM.md).",
    )
    max_upload_bytes: int = Field(
        default=2 * 1024**3, gt=0,
        description="Largest raw (possibly compressed) log accepted per upload or chunked log; "
        "larger bodies get 413 as soon as the limit is crossed.",
    )
    sync_diagnose_max_bytes: int = Field(
        default=8 * 1024**2, ge=0,
        description="Logs up to this many raw bytes are diagnosed inline (200); larger ones are "
        "queued and answered with 202 {id, status} to poll.",
    )
    diagnosis_workers: int = Field(
        default_factory=lambda: max(1, min(4, os.cpu_count() or 1)), ge=1,
        description="Parallel diagnoses in the server process (size of the worker pool).",
    )
    diagnosis_executor: DiagnosisExecutor = Field(
        default=DiagnosisExecutor.PROCESS,
        description="process: diagnoses run in a spawned process pool (CPU parallelism); "
        "thread: in threads of the server process (fast start-up, for tests and tiny setups).",
    )
    run_worker: bool = Field(
        default=True,
        description="Run the background diagnosis worker inside the server. Turn off for API-only "
        "replicas (PostgreSQL: run `logdx worker` processes instead) or maintenance; queued "
        "diagnoses then wait as `pending` rows.",
    )
    migrate_on_startup: bool = Field(
        default=True, description="Upgrade the database to the newest Alembic revision at start-up."
    )
    rules_dir: Path | None = Field(
        default=None,
        description="Directory of rule files; unset: the rules/ shipped with logdx. Approved "
        "proposed rules are appended to <rules_dir>/<family>.yaml, so it must be writable to approve.",
    )
    rules_overlay: Path | None = Field(
        default=None,
        description="Directory of a site's own rule files, loaded beside the rules directory's (the "
        "shipped ones unless LOGDX_RULES_DIR is set): the way to add rules without copying the library. "
        "A rule id that is already defined is an error naming both files (the server refuses to start).",
    )
    relabel_heartbeat_s: float = Field(
        default=10.0, gt=0, le=3600,
        description="Batch re-labeling on PostgreSQL: seconds between a worker's heartbeats, and "
        "between its checks for re-labeling tasks of workers that stopped.",
    )
    relabel_stalled_after_s: float = Field(
        default=60.0, gt=0, le=86400,
        description="Batch re-labeling on PostgreSQL: a worker silent this long is considered dead "
        "and its running re-labeling tasks are retried by another worker.",
    )
    relabel_archive_root: Path | None = Field(
        default=None,
        description="Directory under which `POST /v1/relabel` may import archives of logs from the "
        "server's disk; unset: archive imports only through the CLI (`logdx relabel --archive`).",
    )
    upload_chunk_bytes: int = Field(
        default=1024**2, ge=4096,
        description="Bytes buffered before each disk write while streaming an upload.",
    )
    # hostile input and overload: bounded time per diagnosis, no poison pills
    diagnosis_deadline_s: float = Field(
        default=120.0, gt=0,
        description="Seconds a diagnosis may spend reading its log; then it stops and answers with "
        "what was read (a partial diagnosis with a note), never a hang.",
    )
    max_decompression_ratio: float = Field(
        default=200.0, gt=1,
        description="A gzip/zstd log that expands more than this many times (past its first 256 MiB) "
        "is read no further: a partial diagnosis with a note.",
    )
    request_body_timeout_s: float = Field(
        default=60.0, gt=0,
        description="Seconds a request body may stall (no bytes received) before the request is "
        "answered 408 and its partial body discarded.",
    )
    diagnosis_max_attempts: int = Field(
        default=3, ge=1,
        description="Runs a diagnosis may start (restarts and crashed workers re-run it); past this it "
        "is `failed` with the reason instead of being re-queued again.",
    )

    # restart controller
    controller_scheduler: ControllerScheduler = Field(
        default="local",
        description="Scheduler the restart controller acts through: local (subprocess jobs on this "
        "machine), slurm (scontrol/srun) or kubernetes (the official client; cordon, pod restart).",
    )
    controller_local_nodes: list[str] = Field(
        default_factory=list,
        description="Node names of the local scheduler (a single machine or the demo), e.g. "
        '["n1","n2","n3","n4"]; their probe workers run as local processes.',
    )
    controller_checkpoint_roots: list[str] = Field(
        default_factory=list,
        description="Directories (on the cluster) a scheduler token's `checkpoint_dir` must lie under, e.g. "
        '["/lustre/ckpt"]; unset: a scheduler token may not name a checkpoint_dir (engineers and admins may).',
    )
    slurm_conf: Path | None = Field(
        default=None, description="slurm.conf for the Slurm adapter; unset: Slurm's own default/SLURM_CONF.",
    )
    slurm_probe_immediate_s: int = Field(
        default=10, ge=1, le=3600,
        description="srun --immediate for probe workers: seconds a probe waits for its nodes' allocation; "
        "a group that gets none did not run (its nodes are unknown, never failed).",
    )
    slurm_probe_args: list[str] = Field(
        default_factory=list,
        description='Extra srun flags for probe workers and health probes, e.g. ["--gpus-per-node=8"] '
        "where GPUs are a gres (JSON list).",
    )
    kube_namespace: str = Field(
        default="default", description="Namespace of the training jobs' pods for the Kubernetes adapter.",
    )
    controller_probe_timeout_s: float = Field(
        default=30.0, ge=5.0,
        description="Timeout of one probe group (rendezvous, then the allgather); a group that does not "
        "report in time has failed.",
    )
    controller_probe_gpus_per_node: int = Field(
        default=1, ge=1, le=64,
        description="Probe ranks per node: one per GPU, so the allgather crosses every device of a node "
        "(srun --ntasks-per-node; on CPU nodes, gloo processes). 1: one rank per node.",
    )
    controller_probe_port: int = Field(
        default=0, ge=0, le=65535,
        description="TCP port of the probe rendezvous store the controller hosts (0: any free port).",
    )
    controller_probe_host: str = Field(
        default="127.0.0.1",
        description="Address the probe workers reach the controller's rendezvous store at (the "
        "controller's address on the cluster network for Slurm/Kubernetes).",
    )
    controller_live_watch: bool = Field(
        default=False,
        description="Watch logs streamed in chunks while they grow: stall and straggler alerts in the audit "
        "log; a stall is diagnosed and recovered (dry-run unless the cluster is enabled).",
    )
    controller_live_interval_s: float = Field(
        default=5.0, gt=0, le=3600, description="Seconds between two passes of the live watch.",
    )
    recovery_rules: Path | None = Field(
        default=None,
        description="Recovery policy file; unset: <rules_dir>/recovery.yaml if present, else the shipped one.",
    )
    notify_webhook_url: SecretStr | None = Field(
        default=None,
        description="Webhook the controller POSTs JSON to when it stops restarting, escalates or a failure "
        "needs a person (owner or admin); the payload has a `text` field, so a Slack incoming webhook "
        "works as is. Unset: notifications are only recorded in the audit log.",
    )
    notify_webhook_retries: int = Field(
        default=3, ge=0, le=10, description="Retries of a failed webhook delivery (refused, timeout, non-2xx).",
    )
    notify_webhook_timeout_s: float = Field(
        default=5.0, gt=0, le=60, description="Timeout of one webhook POST.",
    )
    notify_webhook_backoff_s: float = Field(
        default=1.0, ge=0, le=300, description="Wait before the first retry; doubled before each next one.",
    )

    @model_validator(mode="after")
    def _expand(self) -> "Settings":
        self.data_dir = self.data_dir.expanduser()
        if self.rules_dir is not None:
            self.rules_dir = self.rules_dir.expanduser()
        if self.rules_overlay is not None:
            self.rules_overlay = self.rules_overlay.expanduser()
        if self.relabel_archive_root is not None:
            self.relabel_archive_root = self.relabel_archive_root.expanduser()
        if self.llm_cache_dir is not None:
            self.llm_cache_dir = self.llm_cache_dir.expanduser()
        return self

    @property
    def effective_rules_dir(self) -> Path:
        from app.resources import rules_dir

        return self.rules_dir or rules_dir()

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'logdx.db'}"

    @property
    def is_postgres(self) -> bool:
        return self.effective_database_url.startswith("postgresql")

    @property
    def blob_dir(self) -> Path:
        return self.data_dir / "blobs"

    @property
    def spool_dir(self) -> Path:
        return self.data_dir / "spool"

    @property
    def uploads_dir(self) -> Path:
        return self.data_dir / "uploads"

    def ensure_dirs(self) -> None:
        # raw logs may hold secrets: the data dir and everything logdx keeps in it is owner-only
        for d in (self.data_dir, self.blob_dir, self.spool_dir, self.uploads_dir):
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
            if d.stat().st_uid == os.getuid():
                d.chmod(0o700)
