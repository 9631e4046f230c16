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
    assert "loss NaN/inf at step 30, line 45" in svg
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


def test_x_is_the_step_spikes_keep_their_height_and_formats_stay_apart():
    points = [{"line": 100 + i, "step": i, "fmt": "a", "values": {"loss": 2.0, "throughput": 1300.0}} for i in range(50)]
    points[25]["values"]["loss"] = 9.26
    points += [{"line": 200 + i, "step": 50 + i, "fmt": "b", "values": {"throughput": 150.0, "loss_scale": 65536.0}}
               for i in range(10)]
    out = charts.metric_charts(points, last_progress_line=None, failure_line=None)
    assert [c.title for c in out] == ["loss", "throughput · line format 1 of 2", "throughput · line format 2 of 2",
                                      "loss scale"]
    loss = str(out[0].svg)
    assert "training step" in loss and 'text-anchor="end">9.26<' in loss
    assert "step 25, line 125: loss 9.26" in loss  # hover cell
    scale = str(out[3].svg)
    assert ">6.554e+04<" in scale
    # the left margin fits the longest y label (it is right-aligned at the margin)
    assert out[3].svg.count('data-pad-l="69.4"') == 1


def test_without_steps_the_axis_says_log_line_and_a_non_finite_tail_is_shaded():
    points = [{"line": 10 + i, "step": None, "values": {"loss": 2.0 - i * 0.01}} for i in range(20)]
    svg = str(charts.metric_charts(points, last_progress_line=None, failure_line=None)[0].svg)
    assert "log line (the log prints no step)" in svg
    stepped = [{"line": 10 + i, "step": i, "values": {"loss": 2.0}} for i in range(20)]
    svg = str(charts.metric_charts(stepped, last_progress_line=None, failure_line=None,
                                   root_cause={"error_type": "NaNLoss", "last_good_step": 15})[0].svg)
    assert "non-finite loss after step 15" in svg
    zoomed = charts.metric_charts(stepped, last_progress_line=None, failure_line=None, zoom=(5, 9))[0]
    assert zoomed.points == 5 and zoomed.x_range == (0, 19)
