"""Time stamps read from log lines in any layout, and how long the lines after a point cover."""

from __future__ import annotations

import pytest

from app.core.timestamps import line_time, span_after


@pytest.mark.parametrize("line, layout", [
    ("2024-05-01 03:56:11,486 - mmcls - INFO - Epoch [2][10/35]", "iso"),
    ("[2024-05-01T03:56:11.123456] PULSE: job is running", "iso"),
    ("10.0.0.3: I0515 20:03:26.569430  443369 flash_attention.cc:1908] dry run", "glog"),
    ("E0526 15:34:12.011717 140569525946176 basic_session_run_hooks.py:760] Model diverged", "glog"),
    ("[12:00:05] step 10 loss 2.3", "clock"),
])
def test_each_layout_is_read(line, layout):
    t = line_time(line)
    assert t is not None and t[0] == layout


@pytest.mark.parametrize("line", [
    "iteration 120/1000 | lm loss: 2.31",  # no time
    "version 1.12.13 build 2024-99-99 33:61:00",  # impossible date and clock
    "elapsed 1:02:03.5 per step",  # a duration, not a clock (single-digit hour)
    " 50%|#####     | 500/1000 [10:03:27<10:03:22,  7.60s/it]",  # a bar's elapsed / remaining
    "Epoch(train) [1][200/735]  lr: 1.9870e-04  eta: 12:46:39  time: 2.8906",
])
def test_lines_without_a_time(line):
    assert line_time(line) is None


def test_the_span_is_measured_from_the_last_stamp_at_or_before_the_point():
    before = ["2024-05-01 10:00:00 step 99", "step 100 loss 2.0"]  # the step line itself has none
    after = ["2024-05-01 10:05:00 saving", "2024-05-01 10:45:30 heartbeat"]
    assert span_after(before, after) == 45 * 60 + 30


def test_without_a_stamp_before_it_the_first_stamp_after_it_is_the_start():
    after = ["[2022-05-01 03:56:11] PULSE: running", "[2022-05-01 05:56:18] PULSE: running"]
    assert span_after(["valid loss at iteration 45000 | lm loss value: 2.3"], after) == 2 * 3600 + 7


def test_no_span_without_two_times_of_one_layout():
    assert span_after(["step 100"], ["Validating ..."]) is None
    assert span_after(["step 100"], ["2024-05-01 10:00:00 saving"]) is None  # one time: no span
    # a time of another layout before the point is no start for these
    assert span_after(["I0515 20:03:26.5 step 2"], ["2024-05-01 10:00:00 a", "2024-05-01 10:00:09 b"]) == 9
