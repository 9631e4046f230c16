"""A loss spike's onset is exact, not the next sampled metric line: the compressor reads a
sample of the metric lines, so the spike is first seen some steps late; the pipeline reads the
lines between the last healthy sample and the first bad one again when the log is a file."""

from __future__ import annotations

import gzip
import io

import pytest

from app.core.pipeline import Pipeline

LINE = (" iteration {i:8d}/  500000 | consumed samples: {s:12d} | elapsed time per iteration (ms): 1234.5 | "
        "learning rate: 3.000E-04 | global batch size:   512 | lm loss: {loss:.6E} | loss scale: 1.0 | "
        "grad norm: {g} | number of skipped iterations:   0 | number of nan iterations:   0 |")


def megatron_log(steps: int, onset: int, *, bad: str = "spike") -> str:
    out = []
    for i in range(1, steps + 1):
        loss, g = 2.2 + 0.01 * (i % 7), "1.198"
        if i >= onset:
            if bad == "spike":
                loss = 9.5 + 0.01 * (i % 5)
            else:
                g = "nan"
        out.append(LINE.format(i=i, s=512 * i, loss=loss, g=g))
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def pipe():
    return Pipeline()


@pytest.mark.parametrize("onset", [15_001, 15_137])
def test_a_spike_onset_is_the_first_bad_step_not_the_next_sample(pipe, tmp_path, onset):
    text = megatron_log(20_000, onset)
    sampled = pipe.diagnose(io.BytesIO(text.encode()), workers=1).diagnosis.root_cause
    assert sampled.error_type == "LossSpike"
    # a stream cannot be read again: the sampled bounds, which contain the true onset
    assert sampled.last_good_step < onset <= sampled.onset_step
    assert (sampled.last_good_step, sampled.onset_step) != (onset - 1, onset)  # the sample is coarse
    path = tmp_path / "train.log"
    path.write_text(text)
    exact = pipe.diagnose(path, workers=1).diagnosis.root_cause
    assert exact.error_type == "LossSpike"
    assert (exact.last_good_step, exact.onset_step) == (onset - 1, onset)
    assert f"iteration {onset:8d}/" in exact.evidence[0].text
    # the same from a gzip file
    gz = tmp_path / "train.log.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    assert (pipe.diagnose(gz, workers=1).diagnosis.root_cause.onset_step) == onset


def test_a_non_finite_grad_norm_has_its_last_healthy_step(pipe, tmp_path):
    path = tmp_path / "train.log"
    path.write_text(megatron_log(20_000, 12_345, bad="nan"))
    rc = pipe.diagnose(path, workers=1).diagnosis.root_cause
    assert rc.error_type == "NaNLoss"
    assert (rc.last_good_step, rc.onset_step) == (12_344, 12_345)


def test_a_diagnosis_without_a_metric_cause_has_no_onset(pipe):
    rc = pipe.diagnose(io.BytesIO(b"RuntimeError: CUDA error: an illegal memory access was encountered\n")).diagnosis.root_cause
    assert rc.onset_step is None and rc.last_good_step is None
