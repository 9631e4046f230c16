"""The controller replayed over the real InfiniteHBD fault trace (bench/replay): its planning
code keeps jobs training better than plain requeue and than a person, and drains no healthy
node when the logs name hosts right."""

from __future__ import annotations

import pytest

from app.controller.recovery import Breaker, breaker_allows, load_recovery_rules
from bench.replay.run import main, with_knobs
from bench.replay.sim import Assumptions, load_trace, simulate

RULES = load_recovery_rules()

@pytest.fixture(scope="module")
def trace():
    faults, horizon = load_trace()
    quarter = horizon / 4
    return [f for f in faults if f.start_h < quarter], quarter

def test_the_trace_is_the_real_one():
    faults, horizon = load_trace()
    assert len(faults) == 583 and round(horizon / 24) == 349  # 584 episodes, one never ends
    assert len({f.node for f in faults}) == 231

def test_logdx_keeps_jobs_training_better_than_both_baselines(trace):
    faults, horizon = trace
    a = Assumptions(ckpt_h=1.0, wrong_host=0.0)
    got = {m: simulate(m, faults, horizon, job_gpus=512, rules=RULES, a=a) for m in ("logdx", "requeue", "manual")}
    assert got["logdx"].ettr > got["manual"].ettr > got["requeue"].ettr
    assert got["logdx"].drains_wrong == 0 and got["logdx"].drains_right > 0
    assert got["logdx"].escalations < got["manual"].escalations
    # plain requeue restarts on the broken node until it is repaired
    assert got["requeue"].failures > 10 * got["logdx"].failures

def test_probe_false_positives_drain_healthy_nodes_and_the_breaker_limits_them(trace):
    faults, horizon = trace
    a = Assumptions(ckpt_h=1.0, probe_false_positive=0.05)
    loose = simulate("logdx", faults, horizon, job_gpus=512, rules=RULES, a=a)
    assert loose.drains_wrong > 0
    tight = simulate("logdx", faults, horizon, job_gpus=512, rules=with_knobs(RULES, breaker=0.001), a=a)
    assert tight.breaker_refusals > 0 and tight.drains_wrong < loose.drains_wrong

def test_the_breaker_always_lets_one_node_through():
    b = Breaker(max_drain_share=0.25, window_s=3600)
    assert breaker_allows(b, drained=set(), host="n1", total_nodes=3) == (True, 1)  # 3 x 25 % rounds to 0
    assert breaker_allows(b, drained={"n1"}, host="n2", total_nodes=3) == (False, 1)
    assert breaker_allows(b, drained={"n1"}, host="n1", total_nodes=3)[0]  # draining it again adds none

def test_the_replay_prints_its_table(capsys):
    assert main(["--gpus", "256", "--ckpt-min", "60", "--offender", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("| 256 GPUs, 60 min") == 3 and "offender = 2" in out
