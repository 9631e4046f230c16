"""Answer cache keyed by (backend, model, prompt version, masked input) with in-flight coalescing:
concurrent identical requests wait for the one call in progress instead of repeating it."""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


def cache_key(*, backend: str, model: str, prompt_version: str, masked_input: str, extra: Any = None) -> str:
    blob = json.dumps([backend, model, prompt_version, masked_input, extra], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class ResponseCache:
    def __init__(self, max_entries: int = 2048) -> None:
        self.max_entries = max_entries
        self._data: OrderedDict[str, Any] = OrderedDict()
        self._inflight: dict[str, Future] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.coalesced = 0

    def get_or_compute(self, key: str, compute: Callable[[], T]) -> tuple[T, bool]:
        """(value, True when it came from the cache or another caller's in-flight call)."""
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                self.hits += 1
                return self._data[key], True
            fut = self._inflight.get(key)
            owner = fut is None
            if owner:
                fut = Future()
                self._inflight[key] = fut
                self.misses += 1
            else:
                self.coalesced += 1
        if not owner:
            return fut.result(), True
        try:
            value = compute()
        except BaseException as exc:  # failures are not cached; waiters see the same error
            with self._lock:
                self._inflight.pop(key, None)
            fut.set_exception(exc)
            raise
        with self._lock:
            self._data[key] = value
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)
            self._inflight.pop(key, None)
        fut.set_result(value)
        return value, False
