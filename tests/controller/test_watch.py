"""Live watching: the detector on a synthetic clock, and `logdx watch` on a file that a real
writer process grows and then stops growing."""

import json
import subprocess
import sys
import time

from app.controller.watch import LiveWatcher
from app.core.rules import load_rules
from tests.controller.logs import progress

RULES = load_rules()


def nano(i, ms, rank=None):
    prefix = f"[rank{rank}]: " if rank is not None else ""
    return f"{prefix}iter {i}: loss 3.2145, time {ms:.2f}ms, mfu 45.67%"


def test_stall_after_k_typical_step_times_with_a_floor():
    w = LiveWatcher(RULES, factor=5, floor_s=2)
    for i in range(10):
        assert w.feed([nano(i, 1000)], now=float(i)) == []
    assert w.typical_step_s() == 1.0 and w.stall_after_s() == 5.0
    assert w.tick(13.9) == []
    alert = w.tick(14.1)[0]
    assert alert.kind == "stall" and alert.details["last_step"] == 9
    assert w.tick(20) == []  # one alert per stall
    w.feed([nano(10, 1000)], 21)
    assert not w.stalled


def test_floor_wins_for_fast_steps_and_spacing_is_learned_without_time_fields():
    w = LiveWatcher(RULES, factor=5, floor_s=30)
    for i, line in enumerate(progress(1, 10)):
        w.feed([line.replace("elapsed time per iteration (ms): 1000.2 | ", "")], now=i * 0.1)
    assert w.stall_after_s() == 30
    assert w.tick(0.9 + 29) == [] and w.tick(0.9 + 31)[0].kind == "stall"


def test_a_log_that_never_shows_progress_and_stops_growing_is_stalled():
    w = LiveWatcher(RULES, factor=5, floor_s=10)
    w.feed(["loading data..."], now=0)
    assert w.tick(9) == [] and w.tick(11)[0].message.startswith("the log has not grown")


def test_straggler_rank_from_per_rank_step_times():
    w = LiveWatcher(RULES, straggler_factor=2)
    alerts = []
    for i in range(5):
        for rank in range(4):
            alerts += w.feed([nano(i, 900 if rank == 2 else 300, rank)], now=float(i))
    assert [a.details["who"] for a in alerts] == ["rank 2"]
    assert alerts[0].kind == "straggler"


WRITER = r"""
import sys, time
path, n, dt = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
with open(path, "a") as f:
    for i in range(n):
        f.write(f"iter {i}: loss 3.2145, time {dt * 1000:.2f}ms, mfu 45.67%\n"); f.flush()
        time.sleep(dt)
"""


def test_watch_cli_reports_a_stall_on_a_live_file(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("")
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(log), "15", "0.1"])
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "app.cli", "watch", str(log), "--factor", "5", "--floor", "1",
                          "--interval", "0.1", "--exit-on-stall", "--max-seconds", "30"],
                         capture_output=True, text=True, timeout=60)
    writer.wait()
    elapsed = time.monotonic() - t0
    assert out.returncode == 1, out.stderr
    alert = json.loads(out.stdout.splitlines()[-1])
    assert alert["kind"] == "stall" and alert["last_step"] == 14
    # writing took ~1.5 s, the stall is called ~1 s (the floor) after the last line
    assert 1.5 < elapsed < 20


def test_a_starting_job_gets_its_start_up_allowance_before_a_silent_log_is_a_stall():
    # imports, rendezvous and a checkpoint load print nothing for a while: not a hang yet
    w = LiveWatcher(RULES, factor=5, floor_s=10, startup_s=60)
    w.feed(["chaos job 7 attempt 2 on node[1-2]"], now=0)
    assert w.tick(11) == [] and w.tick(59) == []
    alert = w.tick(61)[0]
    assert alert.kind == "stall" and "start-up allowance 60" in alert.message
    # once training shows progress, the floor applies again
    w = LiveWatcher(RULES, factor=5, floor_s=10, startup_s=60)
    for i in range(5):
        w.feed([nano(i, 100)], now=float(i))
    assert w.tick(4 + 11)[0].details["last_step"] == 4
