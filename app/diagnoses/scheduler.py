"""Fair admission of diagnoses to the worker pool (one event loop, the server's).

A diagnosis takes a slot before it is claimed (its row says `running` only once it really runs)
and holds it until it is written. There are as many slots as pool workers. Big logs (more than
LOGDX_SYNC_DIAGNOSE_MAX_BYTES uncompressed, known or bounded) may hold all slots but one, so a
small diagnosis always finds a worker within one small diagnosis' time, however many big ones
wait. Waiters are admitted small first, then the tenant (cluster, or token for one-shots) with
the fewest running diagnoses, then the one served least since the pool was last idle, then
oldest first: one tenant's flood cannot starve another.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass


@dataclass
class _Waiter:
    seq: int
    tenant: str
    big: bool
    future: asyncio.Future


class SlotScheduler:
    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.big_slots = max(1, slots - 1)
        self.running = 0
        self.running_big = 0
        self.by_tenant: Counter[str] = Counter()
        self.served: Counter[str] = Counter()  # admissions since the pool was last idle
        self._waiting: list[_Waiter] = []
        self._seq = itertools.count()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def _admissible(self, w: _Waiter) -> bool:
        return not w.big or self.running_big < self.big_slots

    def _dispatch(self) -> None:
        while self.running < self.slots:
            ready = [w for w in self._waiting if self._admissible(w) and not w.future.done()]
            if not ready:
                return
            w = min(ready, key=lambda w: (w.big, self.by_tenant[w.tenant], self.served[w.tenant], w.seq))
            self._waiting.remove(w)
            self._take(w.tenant, w.big)
            self.served[w.tenant] += 1
            w.future.set_result(None)

    def _take(self, tenant: str, big: bool) -> None:
        self.running += 1
        self.running_big += big
        self.by_tenant[tenant] += 1

    def _release(self, tenant: str, big: bool) -> None:
        self.running -= 1
        self.running_big -= big
        self.by_tenant[tenant] -= 1
        if self.by_tenant[tenant] <= 0:
            del self.by_tenant[tenant]
        if not self.running and not self._waiting:
            self.served.clear()  # idle: history starts over
        self._dispatch()

    @asynccontextmanager
    async def slot(self, *, tenant: str, big: bool) -> AsyncIterator[None]:
        waiter = _Waiter(next(self._seq), tenant, big, asyncio.get_running_loop().create_future())
        self._waiting.append(waiter)
        self._dispatch()
        try:
            await waiter.future
        except asyncio.CancelledError:
            if waiter in self._waiting:
                self._waiting.remove(waiter)
            elif waiter.future.done() and not waiter.future.cancelled():
                self._release(tenant, big)  # admitted in the same tick it was cancelled
            raise
        try:
            yield
        finally:
            self._release(tenant, big)
