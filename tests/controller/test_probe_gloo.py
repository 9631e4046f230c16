"""The probe on real torch.distributed gloo process groups: one spawned worker process per
'node' on localhost, faults injected per node. Payloads 1 MiB, timeouts 5 s (2-core machine)."""

import pytest

from app.controller.probe_plan import Verdict
from app.controller.probe_runner import LocalProbeCluster
from tests.controller.ports import free_port

TIMEOUT = 5.0


def cluster(n, faults=None):
    c = LocalProbeCluster([f"node{i:02d}" for i in range(n)], timeout_s=TIMEOUT, nbytes=1 << 20,
                          faults=faults, port=free_port())
    c.wait_ready()
    return c


def test_no_fault_no_blame_over_repeated_runs():
    with cluster(8) as c:
        for _ in range(3):
            report = c.probe()
            assert report.verdict is Verdict.OK and report.faulty == [] and report.slow == [], report.reason
            assert len(report.rounds) == 1


def test_node_that_exits_before_joining_is_found():
    with cluster(8, {"node05": "exit_before"}) as c:
        report = c.probe()
    assert report.faulty == ["node05"] and report.verdict is Verdict.FAULTY


def test_corrupt_data_is_found_with_an_odd_count():
    with cluster(9, {"node08": "corrupt"}) as c:
        report = c.probe()
    assert report.faulty == ["node08"]
    assert len(report.rounds[0][-1]["members"]) == 3  # the triple


def test_two_faults_exit_mid_collective_and_hang_are_found_together():
    with cluster(8, {"node02": "exit_mid", "node06": "hang"}) as c:
        report = c.probe()
    assert report.faulty == ["node02", "node06"], report.rounds
    assert any("timed out" in g["error"] or "Timeout" in g["error"] or "timeout" in g["error"].lower()
               for g in report.rounds[1])


def test_suspect_first_and_a_slow_node_is_a_straggler_not_faulty():
    with cluster(8, {"node03": "slow"}) as c:
        report = c.probe(suspects=["node03"])
    assert tuple(report.rounds[0][0]["members"]) == ("node03", "node00")
    assert report.faulty == [] and report.slow == ["node03"], report.rounds


@pytest.mark.slow
def test_sixteen_nodes_with_a_hang_and_corrupt_data():
    with cluster(16, {"node04": "hang", "node13": "corrupt"}) as c:
        report = c.probe()
    assert report.faulty == ["node04", "node13"]


def test_every_local_device_takes_part_with_one_rank_per_gpu():
    # the fault sits on local rank 1 (a node's second GPU): one rank per node never touches it
    faults = {"node02:1": "corrupt"}
    with cluster(4, faults) as c:
        assert c.probe().verdict is Verdict.OK
    with LocalProbeCluster([f"node{i:02d}" for i in range(4)], timeout_s=TIMEOUT, nbytes=1 << 16,
                           faults=faults, port=free_port(), per_node=2) as c:
        c.wait_ready()
        report = c.probe()
    assert report.faulty == ["node02"], report.rounds
    # round 2 pairs node02 (ranks 0, 1) with a good node: its second GPU, rank 1, sent the bad chunk
    assert "corrupt data from rank 1" in report.rounds[1][0]["error"]
