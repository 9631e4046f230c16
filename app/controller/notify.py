"""Notifications out of the controller: a JSON POST to a webhook, retried with backoff.

The payload is generic JSON with a `text` field, so a Slack (or Mattermost, Teams workflow)
incoming webhook shows it as is. Delivery runs in its own thread: a dead or slow endpoint never
holds up or breaks a recovery; how the delivery ended (attempts, status, error) is written to
the notify step's audit row when it is known.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx


@dataclass(frozen=True)
class Delivery:
    delivered: bool
    attempts: int
    status_code: int | None = None
    error: str | None = None

    def to_dict(self) -> dict:
        return {"delivered": self.delivered, "attempts": self.attempts, "status_code": self.status_code,
                "error": self.error}


class WebhookNotifier:
    """POST `payload` to `url`; a 2xx is delivered, anything else (refused connection, timeout,
    4xx/5xx) is retried `retries` times after `backoff_s`, 2 x backoff_s, ..."""

    def __init__(self, url: str, *, retries: int = 3, timeout_s: float = 5.0, backoff_s: float = 1.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.url = url
        self.retries = retries
        self.timeout_s = timeout_s
        self.backoff_s = backoff_s
        self.sleep = sleep
        self._threads: list[threading.Thread] = []

    def deliver(self, payload: dict) -> Delivery:
        """Synchronous: returns when delivered or the retries are spent."""
        error, status = None, None
        for attempt in range(1, self.retries + 2):
            try:
                resp = httpx.post(self.url, json=payload, timeout=self.timeout_s, follow_redirects=False)
                status = resp.status_code
                if 200 <= status < 300:
                    return Delivery(True, attempt, status)
                error = f"HTTP {status}: {resp.text[:200]}"
            except httpx.HTTPError as exc:
                status, error = None, f"{type(exc).__name__}: {exc}"[:300]
            if attempt <= self.retries:
                self.sleep(self.backoff_s * 2 ** (attempt - 1))
        return Delivery(False, self.retries + 1, status, error)

    def send(self, payload: dict, *, done: Callable[[Delivery], None]) -> None:
        """Deliver in a thread and call `done` with the result. The thread is not a daemon: a
        short-lived CLI (the epilog's `logdx recover`) waits for it before exiting."""
        def work() -> None:
            try:
                result = self.deliver(payload)
            except Exception as exc:  # noqa: BLE001 - a notification must never take anything down
                result = Delivery(False, 0, None, f"{type(exc).__name__}: {exc}")
            try:
                done(result)
            except Exception:  # noqa: BLE001, S110 - nowhere left to report to; the audit row stays "sending"
                pass

        thread = threading.Thread(target=work, name="logdx-notify")
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def join(self, timeout_s: float | None = None) -> None:
        """Wait for the deliveries in flight (tests, shutdown)."""
        for thread in list(self._threads):
            thread.join(timeout_s)


def message(*, event: str, to: str, cluster: str, external_id: str, job_id: int, error_type: str,
            action: str, reason: str) -> str:
    """The one line a person reads in the chat channel."""
    head = {"escalate": "stopped restarting", "notify": "needs a person"}.get(event, event)
    return (f"logdx: job {external_id} on {cluster} {head} ({error_type}, {action}) for the {to}: "
            f"{reason} (logdx job {job_id})")
