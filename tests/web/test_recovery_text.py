"""The job page's sentences for probes and recovery runs, from real ORM rows (no database needed to
build them), and a spike without a step."""

from datetime import UTC, datetime

from app.actions.models import ControllerAction
from app.controller.models import ProbeRun, RecoveryRun
from app.web import charts
from app.web.recovery import probe_view, run_view

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def action(id_, kind, status, params, result):  # noqa: ANN001, ANN201
    return ControllerAction(id=id_, job_id=1, kind=kind, status=status, params={"run_id": 7, **params},
                            result=result, dry_run=False, actor="api:x", created_at=NOW)


def test_a_probe_names_the_faulty_host_and_a_verdict_per_host():
    row = ProbeRun(id=3, cluster="lab", job_id=1, hosts=["n1", "n2", "n3"], verdict="faulty", faulty=["n3"],
                   slow=["n2"], duration_s=4.2, created_at=NOW,
                   result={"healthy": ["n1", "n2"], "reason": "n3 failed twice"})
    view = probe_view(row)
    assert view.summary.startswith("Tested 3 hosts (n1, n2, n3): n3 found faulty. Slow: n2.")
    assert [(h.host, h.verdict) for h in view.hosts] == [("n1", "passed"), ("n2", "slow"), ("n3", "faulty")]


def test_a_recovery_run_in_sentences_with_the_refusal_and_its_reason():
    run = RecoveryRun(id=7, job_id=1, action="isolate_and_restart", policy_id="hardware", retry_number=1,
                      dry_run=False, status="done", reason="a GPU fault", created_at=NOW, outcome={},
                      plan={"restart": True, "steps": [{"kind": "probe", "hosts": ["n3", "n4"], "reason": "find it"}]})
    actions = [
        action(1, "decide", "done", {}, {"reason": "a GPU fault"}),
        action(2, "probe", "done", {"hosts": ["n3", "n4"]}, {"verdict": "faulty", "faulty": ["n3", "n4"]}),
        action(3, "drain", "done", {"host": "n3", "reason": "failed the allgather probe"}, {"drained": "n3"}),
        action(4, "drain", "refused", {"host": "n4", "reason": "failed the allgather probe"},
               {"why": "circuit breaker: draining n4 would make 2 of 6 nodes drained"}),
        action(5, "requeue", "done", {}, {"checkpoint": "/ck/step-30", "checkpoint_step": 30, "exclude": ["n3", "n4"]}),
        ControllerAction(id=6, job_id=1, kind="drain", status="done", params={"run_id": 8, "host": "n9"}, result={},
                         dry_run=False, actor="x", created_at=NOW),  # another run's step
    ]
    view = run_view(run, actions)
    assert view.planned == "Planned: isolate and restart (policy hardware, restart 1): a GPU fault"
    assert view.steps == ["probe n3, n4: find it"]
    assert [s.text for s in view.sentences] == [
        "Probed n3, n4 with the allgather test: n3, n4 faulty.",
        "Drained n3: failed the allgather probe",
        "Refused to drain n4: circuit breaker: draining n4 would make 2 of 6 nodes drained",
        "Requeued the job from checkpoint /ck/step-30 (step 30), excluding n3, n4.",
    ]


def test_a_spike_without_a_step_says_no_step():
    points = [{"line": 10 + i, "values": {"loss": 2.0}} for i in range(30)]
    points[20]["values"] = {"loss": 50.0}
    svg = str(charts.metric_charts(points, last_progress_line=None, failure_line=None)[0].svg)
    assert "spike: 50 at line 30" in svg and "None" not in svg
