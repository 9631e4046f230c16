import random

from app.web import charts


def test_a_jump_is_a_spike_and_noise_is_not():
    rng = random.Random(1)
    values = [2.0 + rng.uniform(-0.05, 0.05) for _ in range(60)]
    assert charts.spikes(values) == []
    values[40] = 9.0
    assert charts.spikes(values) == [40]


def test_metric_charts_mark_nan_progress_and_failure():
    points = [{"line": 10 + i, "step": i, "values": {"loss": 3.0 - i * 0.01, "grad_norm": 1.0}} for i in range(30)]
    points.append({"line": 45, "step": 30, "values": {}, "nan": ["loss"]})
    out = charts.metric_charts(points, last_progress_line=39, failure_line=50)
    assert [c.key for c in out] == ["loss", "grad_norm"]
    svg = str(out[0].svg)
    assert 'class="progress"' in svg and 'class="failure"' in svg
    assert "NaN/inf at line 45" in svg
    assert out[0].points == 30


def test_no_chart_without_a_series():
    assert charts.metric_charts([{"line": 1, "step": 1, "values": {"loss": 1.0}}], last_progress_line=None,
                                failure_line=None) == []
    assert charts.metric_charts(None, last_progress_line=None, failure_line=None) == []


def test_sparkline_and_bar_scale_and_label():
    svg = str(charts.sparkline([0, 2, 4], label="jobs per day"))
    assert svg.count("<rect") == 3 and 'aria-label="jobs per day"' in svg
    assert 'width="80.0"' in str(charts.bar(0.5, width=160))
    assert 'width="160.0"' in str(charts.bar(3.0, width=160))  # clamped


def test_a_loss_point_the_diagnosis_cites_is_marked_even_in_a_short_series():
    points = [{"line": n, "step": n, "values": {"loss": v}} for n, v in [(4, 1.1), (5, 1.2), (6, 11.5)]]
    chart = charts.metric_charts(points, last_progress_line=None, failure_line=6, evidence_lines={6})[0]
    assert chart.spikes == 1 and "spike: 11.5 at step 6" in str(chart.svg)
