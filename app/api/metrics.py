"""Prometheus metrics, one registry per app (tests build many apps in one process)."""

from __future__ import annotations

import time
from http import HTTPStatus
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 180, 600)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("logdx_http_requests", "HTTP requests served",
                                ["method", "route", "status"], registry=r)
        self.request_seconds = Histogram("logdx_http_request_duration_seconds", "HTTP request latency",
                                         ["method", "route"], buckets=_LATENCY_BUCKETS, registry=r)
        self.diagnoses = Counter("logdx_diagnoses", "Diagnoses finished", ["mode", "outcome"], registry=r)
        self.diagnosis_seconds = Histogram("logdx_diagnosis_duration_seconds",
                                           "Pipeline time per diagnosis", ["mode"],
                                           buckets=_LATENCY_BUCKETS, registry=r)
        self.ingested_bytes = Counter("logdx_ingested_bytes", "Raw log bytes received", ["kind"],
                                      registry=r)
        self.rule_hits = Counter("logdx_rule_hits", "Diagnosis rules named in finished diagnoses",
                                 ["rule_id", "error_type"], registry=r)
        self.llm_calls = Counter("logdx_llm_calls", "Diagnoses the LLM agent reviewed, by outcome "
                                 "(accepted, rejected, error)", ["model", "outcome"], registry=r)
        self.llm_tokens = Counter("logdx_llm_tokens", "LLM tokens spent on diagnoses",
                                  ["model", "direction"], registry=r)

    def observe_diagnosis(self, diagnosis: dict[str, Any], *, mode: str) -> None:
        self.diagnoses.labels(mode=mode, outcome="ok").inc()
        root = diagnosis.get("root_cause") or {}
        if root.get("rule_id"):
            self.rule_hits.labels(rule_id=root["rule_id"], error_type=root.get("error_type", "")).inc()
        for co in diagnosis.get("co_occurring") or []:
            if co.get("rule_id"):
                self.rule_hits.labels(rule_id=co["rule_id"], error_type=co.get("error_type", "")).inc()

    def observe_llm(self, llm: dict[str, Any] | None) -> None:
        """Account one LLM review (`output["llm"]` of a diagnosis), if the agent was consulted."""
        if not llm:
            return
        model = llm.get("model") or "unknown"
        outcome = "accepted" if llm.get("accepted") else ("rejected" if llm.get("verdict") else "error")
        self.llm_calls.labels(model=model, outcome=outcome).inc()
        self.llm_tokens.labels(model=model, direction="in").inc(llm.get("tokens_in") or 0)
        self.llm_tokens.labels(model=model, direction="out").inc(llm.get("tokens_out") or 0)

    def render(self) -> bytes:
        return generate_latest(self.registry)


# label values come from fixed sets: a client must not be able to add series (memory, render time)
KNOWN_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})
KNOWN_STATUSES = frozenset(int(s) for s in HTTPStatus)


def method_label(method: str) -> str:
    return method if method in KNOWN_METHODS else "other"


def status_label(status: int) -> str:
    return str(status) if status in KNOWN_STATUSES else "other"


class MetricsMiddleware:
    """Pure ASGI (does not buffer streamed bodies); labels requests by route template."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def _send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, _send)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            method = method_label(scope.get("method", ""))
            self.metrics.requests.labels(method=method, route=route, status=status_label(status)).inc()
            self.metrics.request_seconds.labels(method=method, route=route).observe(
                time.perf_counter() - started)
