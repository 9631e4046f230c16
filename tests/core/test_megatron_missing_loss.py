"""Megatron-LM's training_log prints a loss only `if avg > 0.0`: a NaN loss leaves the iteration
line without it. Such a line after lines with the loss is a non-finite loss (the filter rule's
`missing_loss_is_nan`), unless the interval's iterations were all skipped (an fp16 overflow)."""

from __future__ import annotations

import io

import pytest

from app.core.pipeline import Pipeline


@pytest.fixture(scope="module")
def pipe():
    return Pipeline()


def _line(i: int, loss: float | None, skipped: int = 0) -> str:
    lm = f" lm loss: {loss:.6E} |" if loss is not None else ""
    return (f" iteration {i:8d}/    8000 | consumed samples: {64 * i:12d} | elapsed time per iteration (ms): 7613.1 |"
            f" learning rate: 6.680E-06 | global batch size:    64 |{lm} loss scale: 1.0 | grad norm: 0.752 |"
            f" number of skipped iterations: {skipped:3d} | number of nan iterations:   0 |")


def _diagnose(pipe, lines):  # noqa: ANN001
    return pipe.diagnose(io.BytesIO(("\n".join(lines) + "\n").encode())).diagnosis


def test_a_loss_that_vanishes_mid_run_is_a_nan_loss(pipe):
    lines = [_line(i, 2.0 - i / 1000) for i in range(3300, 3385)] + [_line(3385, None)]
    d = _diagnose(pipe, lines)
    assert d.root_cause.error_type == "NaNLoss" and d.action.kind == "rollback_and_skip"
    assert (d.root_cause.onset_step, d.root_cause.last_good_step) == (3385, 3384)


def test_no_loss_from_the_start_or_a_skipped_interval_is_not_a_nan(pipe):
    # an fp16 run's first intervals skip every iteration (loss-scale search): no loss, said so
    lines = [_line(i, None, skipped=10) for i in range(10, 40, 10)] + [_line(i, 2.0) for i in range(40, 400, 10)]
    lines += [_line(400, None, skipped=10)] + [_line(i, 1.9) for i in range(410, 500, 10)]
    d = _diagnose(pipe, lines)
    assert d.root_cause.error_type != "NaNLoss", d.root_cause.explanation
