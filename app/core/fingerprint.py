"""Failure fingerprints: "the same failure again" across attempts, jobs, hosts and clusters.

A fingerprint ignores what varies between occurrences of one failure (rank, host, iteration,
addresses, paths, timestamps, PIDs) and keeps what identifies it: the root-cause type, the rule
that found it, and the masked text of its first evidence line. The restart controller uses it to
stop restarting a job that keeps failing the same way; the UI groups failures by it the way an
error tracker groups crash reports.
"""

from __future__ import annotations

import hashlib

import regex

from app.core import regexcache
from app.core.types import Diagnosis

# Order matters: the wider masks run first so that their digits do not become `<n>` pieces.
_MASKS: list[tuple[regex.Pattern, str]] = [
    (regexcache.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"), "<time>"),
    (regexcache.compile(r"\b[A-Z][a-z]{2}\s+\d{1,2}\s\d{2}:\d{2}:\d{2}\b"), "<time>"),
    (regexcache.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b"), "<ip>"),
    (regexcache.compile(r"\[[0-9a-fA-F:]{6,}\](?::\d+)?"), "<ip>"),
    (regexcache.compile(r"(?:/[\w.@+-]+){2,}/?"), "<path>"),
    (regexcache.compile(r"0x[0-9a-fA-F]+|\b[0-9a-fA-F]{8,}\b"), "<hex>"),
    (regexcache.compile(r"\b[A-Za-z][A-Za-z_-]*-?\d+[A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)+\b"), "<host>"),
    (regexcache.compile(r"\d+(?:\.\d+)?(?:[eE][+-]?\d+)?"), "<n>"),
    (regexcache.compile(r"\s+"), " "),
]
# launcher prefixes that say who printed a line, not what happened
_PREFIX = regexcache.compile(
    r"^(?:\[(?:rank|Rank|RANK|default)\s?<n>\]:?\s*|<n>:\s|[\w.-]+:\s(?=\S)|<host>:\s)+")


def mask_text(text: str) -> str:
    """The stable core of a log line: volatile parts masked, launcher prefixes removed."""
    out = text.strip()
    for rx, repl in _MASKS:
        out = rx.sub(repl, out)
    return _PREFIX.sub("", out).strip()[:300]


def fingerprint(diagnosis: Diagnosis) -> str:
    """A 16-hex-digit id of the failure: type + rule + masked first evidence line."""
    rc = diagnosis.root_cause
    first = mask_text(rc.evidence[0].text) if rc.evidence else ""
    key = "\x1f".join([rc.error_type.value, rc.rule_id or "", first])
    return hashlib.sha256(key.encode("utf-8", "replace")).hexdigest()[:16]
