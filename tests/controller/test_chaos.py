"""A short fault-injection campaign (bench/chaos/) on a real training job on the local Slurm
cluster, recovered by logdx as deployed (serve + epilog + live watch + controller): one fault per
family. Fails when a fault is not detected or not recovered, or a healthy node is drained."""

from __future__ import annotations

import os
import random
import shutil
import time

import pytest

CONF = os.environ.get("LOGDX_TEST_SLURM_CONF")
pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.skipif(
    not CONF or os.geteuid() != 0 or shutil.which("sbatch") is None,
    reason='no local Slurm cluster (run eval "$(.ci/slurm.sh)" as root first; .ci/run does)')]


def test_one_fault_of_each_family_is_detected_and_recovered_and_no_healthy_node_is_drained(tmp_path):
    from bench.chaos.campaign import Campaign
    from bench.chaos.deploy import Deployment
    from bench.chaos.faults import FAMILIES
    from bench.chaos.run import schedule, table

    dep = Deployment(tmp_path / "chaos")
    dep.start()
    families = [f for f in FAMILIES if dep.tmpfs or f != "disk_full"]
    camp = Campaign(dep, human_delay_s=5, log=print)
    t0 = time.monotonic()
    try:
        camp.start_job()
        rng = random.Random(3)
        for i, (family, _) in enumerate(schedule(len(families), 3, families), 1):
            camp.run_fault(i, family, rng, lead_s=2.5)
    finally:
        camp.inj.clear_all()
        dep.stop()
    results = camp.results
    print(table(results), f"\n{time.monotonic() - t0:.0f} s")
    assert sorted(r.family for r in results) == sorted(families)
    assert [r.n for r in results if r.detected_s is None] == [], "faults logdx never acted on"
    assert [r.n for r in results if not r.recovered] == [], "faults after which training did not run again"
    assert [(r.n, r.wrong_drains) for r in results if r.wrong_drains] == [], "healthy nodes drained"
    # the node faults: the probe finds the bad node; it is drained (or, when the breaker refuses a
    # second drain within its window, left out of the restart)
    assert all(r.isolated for r in results if r.family in ("bad_node", "node_loss")), \
        [(r.family, r.drained, r.refused, r.excluded) for r in results]
