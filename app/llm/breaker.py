"""A circuit breaker: after `failures` consecutive failures, skip calls for `cooldown_s`, then let
one trial call through (half-open); its success closes the circuit, its failure re-opens it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class CircuitBreaker:
    def __init__(self, *, failures: int = 3, cooldown_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.threshold = failures
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._lock = threading.Lock()
        self._consecutive = 0
        self._opened_at: float | None = None
        self._trial_out = False

    @property
    def state(self) -> str:
        with self._lock:
            return self._state()

    def _state(self) -> str:
        if self._opened_at is None:
            return "closed"
        if self._clock() - self._opened_at >= self.cooldown_s:
            return "half_open"
        return "open"

    def allow(self) -> bool:
        with self._lock:
            state = self._state()
            if state == "closed":
                return True
            if state == "half_open" and not self._trial_out:
                self._trial_out = True
                return True
            return False

    def record_success(self) -> None:
        with self._lock:
            self._consecutive = 0
            self._opened_at = None
            self._trial_out = False

    def record_failure(self) -> None:
        with self._lock:
            self._consecutive += 1
            if self._trial_out or self._consecutive >= self.threshold:
                self._opened_at = self._clock()
            self._trial_out = False
