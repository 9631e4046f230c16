"""Switches that turn one diagnosis mechanism off, for ablation measurements.

`LOGDX_ABLATE` holds a comma-separated list of mechanism names (e.g.
`LOGDX_ABLATE=exceptions,signals`); `bench/eval_realworld.py` runs with it set to show what each
mechanism contributes. Never set in production: every mechanism is on by default.

Known names: `exceptions` (traceback structure and the exception table), `signals`
(format-free non-finite values and step counters), `catalogs` (emitter-catalog rules),
`hosts` (suspect-host extraction beyond the failing line), `stall` (a hang read only when the
stall shows in the log, by time stamps or a stall message: off, a log that ends on a filter
rule's step line, or with any output after its last step, is a Hang as before),
`timing` (the policy conditions that read when a failure happened: `first_collective`,
`early_collective`, `never_connected`, `before_training` are then never true; and an error that
came back with training progress between its occurrences is no longer read as tolerated), `collectives` (the
policy conditions that read the timed-out collectives' shape and deadline: `scalar_collective`,
`mismatched_collectives`, `short_timeout`), `severity` (an error a glog / c10 emitter printed at
its warning or info level, with no error-looking line after it, is one it went on from),
`subsystems` (the vocabulary fallback that names the family of a failure no rule typed, by
the subsystem and failure its line names: rules/subsystems.yaml), `retrieval` (the CLI's no-model suggestion: the nearest
rule examples' vote on a log the rules leave Unknown, reported as a note).
"""

from __future__ import annotations

import os
from functools import lru_cache


@lru_cache(maxsize=1)
def _off() -> frozenset[str]:
    raw = os.environ.get("LOGDX_ABLATE", "")
    return frozenset(p.strip() for p in raw.split(",") if p.strip())


def enabled(mechanism: str) -> bool:
    """True unless `mechanism` is listed in LOGDX_ABLATE."""
    return mechanism not in _off()
