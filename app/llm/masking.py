"""Mask what must not leave the machine (hosts, IPs, users, paths, secrets) and restore it after.

A `Masking` is built per request: the same value always maps to the same placeholder
(`<HOST_1>`), so the model can still reason about "the same host"; `restore` puts the original
values back into the model's answer. Secrets are replaced but never restored into answers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import regex

from app.core.secrets import SECRET_RE as _SECRET_RE

# secrets first (they may contain path-like or host-like text), then URLs, ...
_EMAIL_RE = regex.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")
_IPV4_RE = regex.compile(r"(?<![\d.])(?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3}(?![\d.])")
_IPV6_RE = regex.compile(r"(?<![:\w])(?:[0-9a-fA-F]{1,4}:){2,7}[0-9a-fA-F]{1,4}(?![:\w])|\bfe80::[0-9a-fA-F:]+")
_USER_RE = regex.compile(r"(?<=/(?:home|Users|users)/)[A-Za-z0-9._-]+|(?<=\b(?:user(?:name)?|USER|LOGNAME)\s*[=:]\s*)[A-Za-z0-9._-]+"
                         r"|\b[A-Za-z0-9._-]+(?=@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\b(?!\.[a-z]{2,}))")
_FQDN_RE = regex.compile(r"\b(?:[a-zA-Z0-9-]+\.)+(?:local|internal|lan|corp|cluster|svc|intra|com|net|org|io|ai|cloud)\b")
_HOST_RE = regex.compile(r"\b(?:[a-zA-Z][a-zA-Z0-9]*-)*(?:node|host|gpu|worker|compute|ip|dgx|hgx|srv|server|cn|gn)"
                         r"[-_]?\d+(?:[-_][a-zA-Z0-9]+)*\b", regex.IGNORECASE)
# directory part of an absolute path; the file name stays (it often names the failing thing)
_PATH_RE = regex.compile(r"(?<![\w.:/])(?:/[A-Za-z0-9._@+-]+)+(?=/[A-Za-z0-9._@+-]+)")
_PLACEHOLDER_RE = regex.compile(r"(<[A-Z]+_\d+>)")
_KNOWN_SYSTEM_DIRS = ("/usr", "/opt/conda/lib", "/lib", "/proc", "/dev", "/sys", "/bin", "/etc")


@dataclass
class Masking:
    """Placeholders of one request; `restore` maps them back in the answer."""

    forward: dict[str, str] = field(default_factory=dict)  # original -> placeholder
    kinds: dict[str, str] = field(default_factory=dict)  # placeholder -> kind
    counters: dict[str, int] = field(default_factory=dict)

    def placeholder(self, kind: str, value: str) -> str:
        if value in self.forward:
            return self.forward[value]
        n = self.counters.get(kind, 0) + 1
        self.counters[kind] = n
        ph = f"<{kind}_{n}>"
        self.forward[value] = ph
        self.kinds[ph] = kind
        return ph

    def restore(self, text: str) -> str:
        if "<" not in text:
            return text
        back = {ph: orig for orig, ph in self.forward.items() if self.kinds[ph] != "SECRET"}
        return _PLACEHOLDER_RE.sub(lambda m: back.get(m.group(0), m.group(0)), text)

    def restore_obj(self, obj: Any) -> Any:
        if isinstance(obj, str):
            return self.restore(obj)
        if isinstance(obj, list):
            return [self.restore_obj(v) for v in obj]
        if isinstance(obj, dict):
            return {k: self.restore_obj(v) for k, v in obj.items()}
        return obj


class Masker:
    """Stateless: `mask(text, known_hosts=...)` returns the masked text and its `Masking`."""

    def __init__(self, *, hosts: bool = True, ips: bool = True, users: bool = True, paths: bool = True,
                 secrets: bool = True) -> None:
        self.hosts, self.ips, self.users, self.paths, self.secrets = hosts, ips, users, paths, secrets

    def mask(self, text: str, *, known_hosts: Iterable[str] = (), masking: Masking | None = None) -> tuple[str, Masking]:
        m = masking or Masking()

        def sub(pattern: regex.Pattern, kind: str, text: str, keep=None) -> str:
            def repl(x: regex.Match) -> str:
                return x.group(0) if keep is not None and keep(x.group(0)) else m.placeholder(kind, x.group(0))
            # never rewrite inside an existing placeholder such as <IP_1>
            parts = _PLACEHOLDER_RE.split(text)
            return "".join(p if i % 2 else pattern.sub(repl, p) for i, p in enumerate(parts))

        if self.secrets:
            text = sub(_SECRET_RE, "SECRET", text)
            text = sub(_EMAIL_RE, "EMAIL", text)
        if self.ips:
            text = sub(_IPV4_RE, "IP", text)
            text = sub(_IPV6_RE, "IP", text)
        if self.hosts:
            for host in sorted({h for h in known_hosts if h and len(h) >= 3}, key=len, reverse=True):
                text = sub(regex.compile(rf"(?<![\w-]){regex.escape(host)}(?![\w-])"), "HOST", text)
            text = sub(_FQDN_RE, "HOST", text, keep=_looks_like_module)
            text = sub(_HOST_RE, "HOST", text)
        if self.users:
            text = sub(_USER_RE, "USER", text)
        if self.paths:
            text = sub(_PATH_RE, "PATH", text, keep=lambda v: v.startswith(_KNOWN_SYSTEM_DIRS))
        return text, m


def _looks_like_module(name: str) -> bool:
    """`torch.distributed.elastic.multiprocessing.api` is code, not a host."""
    return name.endswith((".py", ".so")) or name.startswith(("torch.", "deepspeed.", "transformers.", "megatron."))
