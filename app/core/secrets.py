"""Secrets in log lines (API keys, tokens, passwords, private keys): redacted wherever a
diagnosis quotes the log (evidence, explanations, notes), for the API, the CLI and the LLM
masking alike. Hosts, ranks and paths are not secrets and stay."""

from __future__ import annotations

from enum import Enum
from typing import Any

from app.core import regexcache
from app.core.validation import Strict

REDACTED = "<SECRET>"

SECRET_PATTERNS = [
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
    r"\b(?:sk|pk|rk)-(?:proj-|live-|test-)?[A-Za-z0-9_-]{16,}",
    r"\bhf_[A-Za-z0-9]{20,}",
    r"\bgh[pousr]_[A-Za-z0-9]{20,}",
    r"\bgithub_pat_[A-Za-z0-9_]{20,}",
    r"\bxox[abpsr]-[A-Za-z0-9-]{10,}",
    r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b",
    r"\bAIza[0-9A-Za-z_-]{30,}",
    r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",  # JWT
    r"(?i)(?<=\bbearer\s)[A-Za-z0-9._~+/=-]{8,}",
    r"(?i)(?<=\b(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|secret[_-]?key"
    r"|auth|credentials?|wandb[_-]?api[_-]?key|hf[_-]?token)\s*[=:]\s*[\"']?)[^\s\"',;]{4,}",
    r"(?<=://[^/\s:@]{1,64}:)[^@\s/]{3,}(?=@)",  # password in user:pass@host URLs
]
SECRET_RE = regexcache.compile("|".join(f"(?:{p})" for p in SECRET_PATTERNS))


def redact(text: str) -> str:
    return SECRET_RE.sub(REDACTED, text)


def redact_obj(obj: Any) -> Any:
    """Every string inside `obj` (dicts, lists, the contract's dataclasses: a new one) with its
    secrets redacted."""
    if isinstance(obj, Enum):  # a StrEnum is a str, but a fixed name, never a secret
        return obj
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, Strict):
        return type(obj)(**{name: redact_obj(getattr(obj, name)) for name in obj.__dataclass_fields__})
    if isinstance(obj, list):
        return [redact_obj(v) for v in obj]
    if isinstance(obj, dict):
        return {k: redact_obj(v) for k, v in obj.items()}
    return obj
