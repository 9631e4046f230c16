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
# What a launcher, logger or syslog writes before a message: who printed the line and when, not
# what happened. Stripped repeatedly from the start of the masked line, so one failure behind
# `[rank3]:`, `[E1204 03:00:01.1 4242 ProcessGroupNCCL.cpp:1]`, `2026-12-04 03:00:01,123 gpu-017
# [rank 3]`, `Dec  4 03:00:01 gpu-017 kernel:`, `gpu-017:4242:4301 [3]`, `[1,3]<stderr>:`,
# `(pid=4242, ip=10.0.0.7)` or `srun: error: gpu-017: task 3:` has one fingerprint.
_PREFIX = regexcache.compile(
    r"^(?:"
    r"<time>[:,]?\s*"
    r"|\[[^\]]{0,100}\]:?\s*"  # any bracketed tag: [rank <n>], [default<n>], [<time>], [pid <n>], [E<n> …]
    r"|\([^)]{0,100}\)\s*"  # (pid=<n>, ip=<ip>)
    r"|<(?:stderr|stdout)>:?\s*"
    r"|[\w./-]+:<n>\]\s*"  # the tail of a glog prefix: `train.py:<n>]`
    r"|(?:<host>|<ip>|[\w.-]*<n>[\w.-]*)(?::<n>)*(?::\s*|\s+)"  # a host, rank or pid: node-<n>: gpu-<n>:<n>:<n>
    r"|task <n>:\s*"
    r"|[\w.-]+:\s(?=\S)"  # a launcher's or logger's word: srun:, error:, kernel:, RuntimeError:
    r")+")


def mask_text(text: str) -> str:
    """The stable core of a log line: volatile parts masked, launcher prefixes removed."""
    out = text.strip()
    for rx, repl in _MASKS:
        out = rx.sub(repl, out)
    core = _PREFIX.sub("", out).strip()
    return (core or out.strip())[:300]


def fingerprint(diagnosis: Diagnosis) -> str:
    """A 16-hex-digit id of the failure: type + rule + masked first evidence line."""
    rc = diagnosis.root_cause
    return fingerprint_of(rc.error_type.value, rc.rule_id, rc.evidence[0].text if rc.evidence else "")


def fingerprint_of(error_type: str, rule_id: str | None, first_evidence: str) -> str:
    """The fingerprint from its parts (a stored result's JSON has them too)."""
    first = mask_text(first_evidence) if first_evidence else ""
    key = "\x1f".join([error_type, rule_id or "", first])
    return hashlib.sha256(key.encode("utf-8", "replace")).hexdigest()[:16]
