"""The two-round pairwise allgather test (Acme, NSDI'24): which node of a job is faulty.

Round 1 puts every candidate node in a group of two (one group of three when the count is odd)
and runs a small allgather in each. Round 2 pairs every node of a failed group with a node of a
passed group; a node that fails again is faulty, its round-1 partner is cleared. The same is done
for groups that passed but took far longer than the rest: the node that is slow again is a
straggler (reported, not drained).

Pure: `run_two_rounds` drives the rounds through a `run_batch` callback that executes a batch of
disjoint groups (real process groups, through the scheduler or locally) and returns their results.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum


class Verdict(StrEnum):
    OK = "ok"
    FAULTY = "faulty"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class GroupResult:
    members: tuple[str, ...]
    ok: bool
    elapsed_s: float = 0.0
    error: str = ""
    # members that reported at all (a dead or hung member reports nothing)
    reported: tuple[str, ...] = ()
    # False: no member started (the scheduler never gave the group its nodes: busy, reserved);
    # such a group says nothing about its members, it neither passed nor failed
    ran: bool = True


@dataclass
class ProbeReport:
    verdict: Verdict
    faulty: list[str]
    slow: list[str]
    healthy: list[str]
    reason: str
    rounds: list[list[dict]] = field(default_factory=list)
    duration_s: float = 0.0
    round_s: list[float] = field(default_factory=list)
    # nodes no group could test (never allocated): neither faulty nor healthy
    untested: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["verdict"] = self.verdict.value
        return out


RunBatch = Callable[[int, list[tuple[str, ...]]], list[GroupResult]]


def order_nodes(nodes: Sequence[str], suspects: Sequence[str] = ()) -> list[str]:
    """Suspects first, each followed by a non-suspect partner, so that a suspect's group holds
    one node under suspicion and round 2 settles it with a single extra pair."""
    seen = dict.fromkeys(nodes)
    sus = [n for n in dict.fromkeys(suspects) if n in seen]
    rest = [n for n in seen if n not in set(sus)]
    out: list[str] = []
    for s in sus:
        out.append(s)
        if rest:
            out.append(rest.pop(0))
    return out + rest


def round1_groups(nodes: Sequence[str], suspects: Sequence[str] = (), *,
                  shrink: bool = False) -> list[tuple[str, ...]]:
    """Pairs of the candidate nodes (the last group a triple when the count is odd).

    `shrink`: with suspects named by the evidence, probe only them and one partner each; the
    other nodes are not tested (they are the partners' pool, not candidates).
    """
    ordered = order_nodes(nodes, suspects)
    if shrink and suspects:
        n_sus = len([s for s in dict.fromkeys(suspects) if s in set(nodes)])
        ordered = ordered[:max(2, 2 * n_sus)]
    if len(ordered) < 2:
        return [tuple(ordered)] if ordered else []
    groups = [tuple(ordered[i:i + 2]) for i in range(0, len(ordered) - 1, 2)]
    if len(ordered) % 2:
        groups[-1] = groups[-1] + (ordered[-1],)
    return groups


def round2_groups(candidates: Sequence[str], partners: Sequence[str]) -> list[tuple[str, str]]:
    """Each candidate with a partner from the passed groups, spreading the load round-robin."""
    out = []
    for i, c in enumerate(candidates):
        others = [p for p in partners if p != c]
        if others:
            out.append((c, others[i % len(others)]))
    return out


def waves(groups: Sequence[tuple[str, ...]]) -> list[list[tuple[str, ...]]]:
    """Split groups into batches in which no node appears twice (one probe per node at a time)."""
    out: list[list[tuple[str, ...]]] = []
    busy: list[set[str]] = []
    for g in groups:
        for batch, used in zip(out, busy, strict=True):
            if not used & set(g):
                batch.append(g)
                used.update(g)
                break
        else:
            out.append([g])
            busy.append(set(g))
    return out


def slow_groups(results: Sequence[GroupResult], *, factor: float, min_extra_s: float) -> list[GroupResult]:
    """Passed groups that took far longer than the median passed group."""
    passed = [r for r in results if r.ok]
    if len(passed) < 2:
        return []
    median = statistics.median(r.elapsed_s for r in passed)
    limit = max(median * factor, median + min_extra_s)
    return [r for r in passed if r.elapsed_s > limit]


def _run(run_batch: RunBatch, round_no: int, groups: list[tuple[str, ...]]) -> list[GroupResult]:
    results: list[GroupResult] = []
    for batch in waves(groups):
        results.extend(run_batch(round_no, batch))
    return results


def run_two_rounds(nodes: Sequence[str], run_batch: RunBatch, *, suspects: Sequence[str] = (),
                   reference: Sequence[str] = (), shrink: bool = False, slow_factor: float = 3.0,
                   min_slow_s: float = 1.0, clock: Callable[[], float] = time.monotonic) -> ProbeReport:
    """Find faulty (and slow) nodes among `nodes`.

    `reference`: nodes known to be good (idle, recently probed) used as partners in round 2 when
    no round-1 group passed; without them such a probe is inconclusive and nothing is blamed.
    A group that did not run (`ran=False`: the scheduler never gave it its nodes) neither passes
    nor fails: its members are `untested` unless another group settles them, and a probe that
    leaves a node untested is inconclusive for it.
    """
    start = clock()
    nodes = list(dict.fromkeys(nodes))
    if len(nodes) < 2 and not reference:
        return ProbeReport(Verdict.INCONCLUSIVE, [], [], [], "a probe needs at least two nodes", untested=nodes)
    if len(nodes) < 2:
        nodes = nodes + [r for r in reference if r not in nodes][:1]
    refs = [r for r in reference if r not in nodes]
    if len(nodes) == 2 and len(refs) >= 2:
        return _two_with_references(nodes, refs, run_batch, start, clock)
    r1 = _run(run_batch, 1, round1_groups(nodes, suspects, shrink=shrink))
    t1 = clock() - start
    failed = [n for r in r1 if r.ran and not r.ok for n in r.members]
    passed = [n for r in r1 if r.ok for n in r.members]
    slow_r1 = [n for r in slow_groups(r1, factor=slow_factor, min_extra_s=min_slow_s) for n in r.members]
    rounds = [[asdict(r) for r in r1]]
    if failed and not passed and 3 <= len(nodes) <= 4 and not reference:
        # a lone triple (or both pairs of four) failed: try every pair once to find good partners
        extra = _run(run_batch, 1, [g for g in itertools.combinations(nodes, 2) if g not in {r.members for r in r1}])
        rounds.append([asdict(r) for r in extra])
        passed = sorted({n for r in extra if r.ok for n in r.members})
    probed = set(failed) | set(passed)
    not_run = [n for r in r1 if not r.ran for n in r.members if n not in probed]
    untested = sorted(n for n in dict.fromkeys(not_run) if n in set(nodes))
    not_run_note = (f"; {len(untested)} node(s) could not be probed (the scheduler did not give the probe "
                    f"their allocation: busy or reserved), nothing is said about them: {untested[:10]}"
                    if untested else "")
    partners = [n for n in passed if n not in set(slow_r1)] or [n for n in reference if n not in set(nodes)]
    if not failed and not slow_r1:
        if not passed:
            return ProbeReport(Verdict.INCONCLUSIVE, [], [], [], "no probe group could run" + not_run_note,
                               rounds, clock() - start, [t1], untested=untested)
        verdict = Verdict.INCONCLUSIVE if untested else Verdict.OK
        return ProbeReport(verdict, [], [], sorted(passed), "every group that ran passed round 1" + not_run_note,
                           rounds, clock() - start, [t1], untested=untested)
    if failed and not partners:
        why = ("every group failed and no known-good node was given: the fault is common to all "
               "nodes (fabric, rendezvous, software) or every node is faulty; nothing is blamed")
        return ProbeReport(Verdict.INCONCLUSIVE, [], [], [], why + not_run_note, rounds, clock() - start, [t1],
                           untested=untested)
    candidates = [n for n in failed if n not in set(passed)] + slow_r1
    r2 = _run(run_batch, 2, round2_groups(candidates, partners))
    rounds.append([asdict(r) for r in r2])
    by_candidate = {r.members[0]: r for r in r2}
    faulty = sorted(c for c in failed if c in by_candidate and by_candidate[c].ran and not by_candidate[c].ok)
    # a candidate whose round-2 group did not run is as untested as one of round 1
    untested = sorted(set(untested) | {c for c in candidates if c in by_candidate and not by_candidate[c].ran})
    median2 = statistics.median([r.elapsed_s for r in r1 if r.ok] or [0.0])
    slow_limit = max(median2 * slow_factor, median2 + min_slow_s)
    slow = sorted(c for c in slow_r1 if c in by_candidate and by_candidate[c].ok
                  and by_candidate[c].elapsed_s > slow_limit)
    # a partner that failed round 2 with two or more candidates and passed with none is itself
    # suspect (it passed round 1, so it broke in between): say so, blame nobody extra
    met: dict[str, list[bool]] = {}
    for r in r2:
        if r.ran:
            met.setdefault(r.members[1], []).append(r.ok)
    bad_partners = sorted(p for p, oks in met.items() if len(oks) >= 2 and not any(oks) and p not in reference)
    if faulty:
        verdict, reason = Verdict.FAULTY, "failed the allgather in round 1 and again with a good partner in round 2"
    else:
        verdict = Verdict.OK if not failed and not untested else Verdict.INCONCLUSIVE
        reason = ("no node failed again in round 2" if failed else "no group failed")
        if failed:
            reason += ": the round-1 failure did not reproduce (transient); nothing is blamed"
    if bad_partners and verdict is Verdict.FAULTY:
        reason += f"; round-2 partners {bad_partners} failed too and should be probed again"
    cleared = {r.members[0] for r in r2 if r.ok}
    healthy = sorted(set(nodes) - set(faulty) - set(slow) - (set(failed) - cleared) - set(untested))
    return ProbeReport(verdict, faulty, slow, healthy, reason + not_run_note, rounds, clock() - start,
                       [t1, clock() - start - t1], untested=untested)


def _two_with_references(nodes: list[str], refs: list[str], run_batch: RunBatch, start: float,
                         clock: Callable[[], float]) -> ProbeReport:
    """Two nodes: a failed pair of them says nothing about which one is bad, so each is paired
    with a known-good node at once (one round instead of two)."""
    results = _run(run_batch, 1, [(nodes[0], refs[0]), (nodes[1], refs[1])])
    rounds = [[asdict(r) for r in results]]
    failed = sorted(r.members[0] for r in results if r.ran and not r.ok)
    healthy = sorted(r.members[0] for r in results if r.ok)
    untested = sorted(r.members[0] for r in results if not r.ran)
    t = clock() - start
    if untested:
        note = (f"{untested} could not be probed (the scheduler did not give the probe their allocation: "
                "busy or reserved); nothing is said about them")
        if failed:
            note += f", and {failed} failed with a known-good partner that nothing else vouches for; nothing is blamed"
        return ProbeReport(Verdict.INCONCLUSIVE, [], [], healthy, note, rounds, t, [t], untested=untested)
    if not failed:
        return ProbeReport(Verdict.OK, [], [], healthy, "both nodes passed with a known-good partner", rounds, t, [t])
    if not healthy:
        return ProbeReport(Verdict.INCONCLUSIVE, [], [], [], "both nodes failed with known-good partners: "
                           "the partners or the fabric may be at fault; nothing is blamed", rounds, t, [t])
    return ProbeReport(Verdict.FAULTY, failed, [], healthy, "failed the allgather with a known-good partner "
                       "while the other node passed with one", rounds, t, [t])
