"""The two-round algorithm against a simulated cluster (a group fails when a member is faulty);
the same code runs on real process groups in test_probe_gloo.py."""

import itertools

import pytest

from app.controller.probe_plan import GroupResult, Verdict, round1_groups, round2_groups, run_two_rounds, waves


def simulate(faulty=(), slow=(), fail_all=False, log=None, busy=()):
    def run_batch(round_no, groups):
        if log is not None:
            log.append((round_no, list(groups)))
        out = []
        for g in groups:
            if any(n in busy for n in g):  # the scheduler never gave the group its nodes
                out.append(GroupResult(g, False, 0.0, "not run", ran=False))
                continue
            bad = fail_all or any(n in faulty for n in g)
            out.append(GroupResult(g, not bad, 5.0 if any(n in slow for n in g) else 0.1))
        return out
    return run_batch


def nodes(n):
    return [f"n{i:02d}" for i in range(n)]


def test_round1_pairs_with_a_triple_when_odd():
    assert round1_groups(nodes(5)) == [("n00", "n01"), ("n02", "n03", "n04")]
    assert round1_groups(nodes(4)) == [("n00", "n01"), ("n02", "n03")]


def test_suspects_first_each_with_a_non_suspect_partner():
    groups = round1_groups(nodes(6), suspects=["n04", "n05"])
    assert groups[:2] == [("n04", "n00"), ("n05", "n01")]
    assert round1_groups(nodes(8), suspects=["n05"], shrink=True) == [("n05", "n00")]


def test_waves_never_put_a_node_in_two_groups_at_once():
    groups = round2_groups(["a", "b", "c"], ["x"])
    assert waves(groups) == [[("a", "x")], [("b", "x")], [("c", "x")]]


@pytest.mark.parametrize("n", range(2, 18))
def test_every_single_fault_is_found(n):
    for bad in nodes(n):
        report = run_two_rounds(nodes(n), simulate([bad]), reference=["ref"] if n == 2 else ())
        assert report.faulty == [bad], (n, bad, report.reason)


@pytest.mark.parametrize("n", [8, 9, 16])
def test_two_faults_are_found_together_and_none_without_a_fault(n):
    for pair in itertools.combinations(nodes(n), 2):
        assert run_two_rounds(nodes(n), simulate(pair)).faulty == sorted(pair)
    clean = run_two_rounds(nodes(n), simulate())
    assert clean.verdict is Verdict.OK and clean.faulty == [] and len(clean.rounds) == 1


def test_every_pair_failing_blames_nobody_without_a_known_good_node():
    report = run_two_rounds(nodes(8), simulate(fail_all=True))
    assert report.verdict is Verdict.INCONCLUSIVE and report.faulty == []
    assert "every group failed" in report.reason


def test_only_two_nodes_need_a_reference_to_blame_one():
    assert run_two_rounds(["a", "b"], simulate(["b"])).verdict is Verdict.INCONCLUSIVE
    report = run_two_rounds(["a", "b"], simulate(["b"]), reference=["good"])
    assert report.faulty == ["b"]


def test_a_transient_round1_failure_blames_nobody():
    calls = []

    def flaky(round_no, groups):
        calls.append(round_no)
        return [GroupResult(g, not (round_no == 1 and "n03" in g), 0.1) for g in groups]
    report = run_two_rounds(nodes(8), flaky)
    assert report.faulty == [] and report.verdict is Verdict.INCONCLUSIVE and "did not reproduce" in report.reason


def test_a_merely_slow_node_is_a_straggler_not_faulty():
    report = run_two_rounds(nodes(8), simulate(slow=["n05"]))
    assert report.faulty == [] and report.slow == ["n05"] and "n04" in report.healthy


def test_round2_only_touches_the_failed_groups():
    log = []
    run_two_rounds(nodes(16), simulate(["n07"], log=log))
    assert [len(g) for r, gs in log if r == 2 for g in gs] == [2, 2]
    assert {n for r, gs in log if r == 2 for g in gs for n in g[:1]} == {"n06", "n07"}


def test_four_nodes_with_two_faults_in_different_pairs():
    # both round-1 pairs fail; trying every pair finds good partners, round 2 settles it
    for pair in itertools.combinations(nodes(4), 2):
        report = run_two_rounds(nodes(4), simulate(pair))
        assert report.faulty == sorted(pair) or (report.verdict is Verdict.INCONCLUSIVE and report.faulty == [])
    assert run_two_rounds(nodes(4), simulate(["n00", "n02"])).faulty == ["n00", "n02"]


def test_round2_never_pairs_a_node_with_itself():
    assert all(a != b for a, b in round2_groups(["a", "b", "c"], ["b", "c"]))


def test_two_nodes_with_two_references_take_one_round():
    log = []
    report = run_two_rounds(["a", "b"], simulate(["a"], log=log), reference=["r1", "r2"])
    assert report.faulty == ["a"] and len(log) == 1 and log[0][1] == [("a", "r1"), ("b", "r2")]
    assert run_two_rounds(["a", "b"], simulate(["a", "b"]), reference=["r1", "r2"]).verdict is Verdict.INCONCLUSIVE
    assert run_two_rounds(["a", "b"], simulate(), reference=["r1", "r2"]).verdict is Verdict.OK


def test_a_group_that_could_not_run_blames_nobody():
    # two nodes with references: the busy one is untested, the other passed
    report = run_two_rounds(["a", "b"], simulate(busy=["b"]), reference=["r1", "r2"])
    assert (report.verdict, report.faulty, report.untested, report.healthy) == (Verdict.INCONCLUSIVE, [], ["b"], ["a"])
    # pairs: the busy node's pair is untested, not a failed round 1 with a round 2 that blames it
    report = run_two_rounds(nodes(6), simulate(busy=["n03"]))
    assert report.faulty == [] and report.verdict is Verdict.INCONCLUSIVE and report.untested == ["n02", "n03"]
    assert set(report.healthy) == {"n00", "n01", "n04", "n05"} and len(report.rounds) == 1
    # a real fault is still found beside a busy node
    report = run_two_rounds(nodes(6), simulate(faulty=["n00"], busy=["n03"]))
    assert report.faulty == ["n00"] and report.untested == ["n02", "n03"] and report.verdict is Verdict.FAULTY
    # nothing could run at all
    report = run_two_rounds(nodes(4), simulate(busy=nodes(4)))
    assert report.verdict is Verdict.INCONCLUSIVE and report.faulty == [] and report.untested == nodes(4)


def test_a_candidate_whose_round2_group_cannot_run_is_untested():
    calls = []

    def run_batch(round_no, groups):
        calls.append(round_no)
        return [GroupResult(g, ran=round_no == 1, ok=round_no == 1 and "n01" not in g) for g in groups]

    report = run_two_rounds(nodes(4), run_batch)
    assert report.faulty == [] and report.verdict is Verdict.INCONCLUSIVE
    assert set(report.untested) == {"n00", "n01"} and report.healthy == ["n02", "n03"]
