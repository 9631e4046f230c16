from datetime import UTC, datetime, timedelta

import pytest
import yaml

from app.controller.recovery import (
    Facts, JobEnd, PriorAttempt, RecoveryAction, RecoveryRulesError, StepKind, load_recovery_rules, plan_recovery,
)
from app.core.types import Category, ErrorType, default_category

RULES = load_recovery_rules()
NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


def facts(error_type=ErrorType.ECCError, fp="f1", step=100, suspects=("n2",), hosts=("n1", "n2"), onset=None,
          end=JobEnd()):
    return Facts(error_type=error_type, category=default_category(error_type), fingerprint=fp,
                 suspect_hosts=suspects, job_hosts=hosts, last_step=step, onset_step=onset, end=end)


def prior(fp="f1", step=100, minutes=10, action=RecoveryAction.ISOLATE_AND_RESTART):
    return PriorAttempt(fingerprint=fp, action=action, last_step=step, at=NOW - timedelta(minutes=minutes))


def test_hardware_probes_drains_and_requeues():
    plan = plan_recovery(facts(), [], {}, RULES, now=NOW)
    assert plan.action is RecoveryAction.ISOLATE_AND_RESTART and plan.restart
    assert [s.kind for s in plan.steps] == [StepKind.PROBE, StepKind.HEALTH, StepKind.DRAIN, StepKind.REQUEUE]
    assert plan.steps[0].params["suspects"] == ["n2"]
    # the health probes run on the host the log names, which stays out of the restart either way
    assert plan.steps[1].hosts == ("n2",) and plan.steps[-1].params["exclude_named"] == ["n2"]


def test_a_collective_failure_probes_but_does_not_exclude_the_hosts_it_names():
    plan = plan_recovery(facts(ErrorType.NCCLTimeoutError), [], {}, RULES, now=NOW)
    assert StepKind.HEALTH in [s.kind for s in plan.steps] and "exclude_named" not in plan.steps[-1].params
    assert StepKind.HEALTH not in [s.kind for s in plan_recovery(facts(suspects=()), [], {}, RULES, now=NOW).steps]


def test_script_error_is_never_restarted_and_owner_is_told_with_evidence():
    f = Facts(error_type=ErrorType.KeyError, category=Category.SCRIPT, fingerprint="k", evidence=("KeyError: 'lr'",))
    plan = plan_recovery(f, [], {}, RULES, now=NOW)
    assert not plan.restart and plan.action is RecoveryAction.NOTIFY_OWNER
    assert plan.steps[0].kind is StepKind.NOTIFY and plan.steps[0].params["evidence"] == ["KeyError: 'lr'"]


def test_same_fingerprint_three_times_without_progress_stops():
    history = [prior(minutes=20), prior(minutes=10)]
    plan = plan_recovery(facts(), history, {}, RULES, now=NOW)
    assert not plan.restart and plan.stopped and "same failure" in plan.stopped
    assert plan.action is RecoveryAction.NOTIFY_ADMIN


def test_progress_between_failures_resets_the_budget():
    history = [prior(step=50, minutes=20), prior(step=80, minutes=10)]
    plan = plan_recovery(facts(step=100), history, {}, RULES, now=NOW)
    assert plan.restart and plan.retry_number == 1


def test_a_different_failure_in_between_breaks_the_same_fingerprint_run():
    history = [prior(minutes=30), prior(fp="other", minutes=20), prior(minutes=10)]
    plan = plan_recovery(facts(), history, {}, RULES, now=NOW)
    assert plan.restart and plan.retry_number == 4


def test_transient_retry_backs_off_until_its_budget():
    f = facts(ErrorType.S3StorageError, suspects=())
    delays = []
    history: list[PriorAttempt] = []
    for i in range(5):
        plan = plan_recovery(Facts(**{**f.__dict__, "fingerprint": f"s{i}"}), history, {}, RULES, now=NOW)
        if not plan.restart:
            break
        delays.append(plan.delay_s)
        history.append(PriorAttempt(f"s{i}", plan.action, 100, NOW - timedelta(minutes=5 - i)))
    assert delays == [30, 60, 120]  # budget: 3 attempts, 30 s doubling
    assert "budget" in plan.stopped


def test_old_attempts_outside_the_window_do_not_count():
    history = [prior(minutes=60 * 30), prior(minutes=60 * 29)]
    assert plan_recovery(facts(), history, {}, RULES, now=NOW).restart


def test_repeat_offender_host_is_drained_without_a_probe_failure():
    plan = plan_recovery(facts(), [], {"n2": 2}, RULES, now=NOW)
    drains = [s for s in plan.steps if s.kind is StepKind.DRAIN and s.hosts]
    assert drains and drains[0].hosts == ("n2",) and plan.repeat_offenders == ("n2",)
    assert not [s for s in plan_recovery(facts(), [], {"n2": 1}, RULES, now=NOW).steps
                if s.kind is StepKind.DRAIN and s.hosts]


def test_loss_spike_rolls_back_before_the_onset_and_skips_batches():
    plan = plan_recovery(facts(ErrorType.LossSpike, step=520, onset=500, suspects=()), [], {}, RULES, now=NOW)
    requeue = plan.steps[-1]
    assert plan.action is RecoveryAction.ROLLBACK_AND_SKIP
    assert requeue.params["before_step"] == 500 and requeue.params["skip"] == [500, 700]


def test_a_sampled_onset_rolls_back_before_the_last_healthy_step():
    # the spike was first seen at step 500, the last step seen healthy was 437: the onset is in
    # 438..500, so a checkpoint of step 450 may hold the bad update and 438 is the first data skipped
    f = Facts(error_type=ErrorType.LossSpike, category=Category.FRAMEWORK, fingerprint="s", last_step=520,
              onset_step=500, last_good_step=437)
    requeue = plan_recovery(f, [], {}, RULES, now=NOW).steps[-1]
    assert requeue.params["before_step"] == 438 and requeue.params["skip"] == [438, 700]


def test_hang_captures_evidence_then_restarts():
    plan = plan_recovery(facts(ErrorType.Hang, suspects=(), end=JobEnd(state="running")), [], {}, RULES, now=NOW)
    assert [s.kind for s in plan.steps] == [StepKind.CAPTURE, StepKind.REQUEUE]


def test_every_error_type_has_a_recovery():
    for et in ErrorType:
        plan = plan_recovery(facts(et), [], {}, RULES, now=NOW)
        assert plan.policy_id != "fallback", et


def test_bad_policy_file_is_refused_with_its_name(tmp_path):
    data = yaml.safe_load(open("rules/recovery.yaml"))
    data["policies"][0]["typo"] = 1
    bad = tmp_path / "recovery.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(RecoveryRulesError, match="recovery.yaml"):
        load_recovery_rules(bad)
    data["policies"][0].pop("typo")
    data["policies"][0]["examples"] = [{"error_type": "ECCError", "expect": "retry"}]
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(RecoveryRulesError, match="hardware"):
        load_recovery_rules(bad)


@pytest.mark.parametrize("end", [JobEnd(state="completed"), JobEnd(exit_code="0:0"),
                                 JobEnd(state="cancelled", exit_code="0:0")])
@pytest.mark.parametrize("error_type", [ErrorType.Hang, ErrorType.ECCError])
def test_a_job_that_ended_cleanly_is_never_restarted(end, error_type):
    plan = plan_recovery(facts(error_type, end=end), [], {}, RULES, now=NOW)
    assert (plan.action, plan.restart, plan.steps) == (RecoveryAction.NONE, False, ())
    assert plan.reason.startswith("completed, nothing to do")


@pytest.mark.parametrize("end", [JobEnd(state="timeout", exit_code="0:0"), JobEnd(state="running"),
                                 JobEnd(exit_code="0:15"), JobEnd(state="node_fail")])
def test_a_hang_restarts_with_a_failure_signal(end):
    plan = plan_recovery(facts(ErrorType.Hang, suspects=(), end=end), [], {}, RULES, now=NOW)
    assert plan.action is RecoveryAction.CAPTURE_AND_RESTART and plan.restart


def test_a_hang_without_any_end_report_is_not_restarted():
    plan = plan_recovery(facts(ErrorType.Hang, suspects=()), [], {}, RULES, now=NOW)
    assert not plan.restart and plan.action is RecoveryAction.NOTIFY_ADMIN
    assert "no failure was reported" in plan.stopped and [s.kind for s in plan.steps] == [StepKind.NOTIFY]


def test_a_repeat_offender_outside_the_job_is_not_drained():
    # the log names n9 (a peer's address, say), which this job never ran on
    plan = plan_recovery(facts(suspects=("n2", "n9")), [], {"n2": 2, "n9": 5}, RULES, now=NOW)
    assert plan.repeat_offenders == ("n2",)
    assert [s.hosts for s in plan.steps if s.kind is StepKind.DRAIN and s.hosts] == [("n2",)]


def test_a_storage_error_on_a_full_checkpoint_filesystem_is_not_restarted():
    from dataclasses import replace

    full = replace(facts(ErrorType.StorageError, suspects=()), checkpoint_space=(64 << 10, 3 << 20))
    plan = plan_recovery(full, [], {}, RULES, now=NOW)
    assert plan.action is RecoveryAction.NOTIFY_OWNER and not plan.restart and plan.policy_id == "checkpoint_disk_full"
    assert "checkpoint filesystem is full" in plan.reason and plan.steps[0].params["to"] == "owner"
    # room for the next save: the transient policy as usual
    roomy = replace(full, checkpoint_space=(10 << 20, 3 << 20))
    assert plan_recovery(roomy, [], {}, RULES, now=NOW).action is RecoveryAction.RETRY
    # no space known (no checkpoint yet, or not readable from the controller): as usual too
    assert plan_recovery(replace(full, checkpoint_space=None), [], {}, RULES, now=NOW).action is RecoveryAction.RETRY


def test_the_checkpoint_of_the_last_step_done_is_good_to_resume_from(tmp_path):
    """The job saved (completely) at step 100, printed iteration 100, then died uploading it:
    resume from step 100, not from the save before (a whole interval lost for nothing)."""
    from app.controller.checkpoints import choose_checkpoint

    plan = plan_recovery(facts(ErrorType.ConnectionError, step=100, suspects=()), [], {}, RULES, now=NOW)
    before = plan.steps[-1].params["before_step"]
    for step in (80, 100):
        shard = tmp_path / f"iter_{step:07d}" / "mp_rank_00"
        shard.mkdir(parents=True)
        (shard / "model_optim_rng.pt").write_bytes(b"w")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("100")
    assert choose_checkpoint(tmp_path, before_step=before).step == 100
    # a save of step 100 still being written when the job died (tracker at 80) is not used
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("80")
    assert choose_checkpoint(tmp_path, before_step=before).step == 80
