"""Builds the restart controller from settings (the API, the CLI and the epilog use this)."""

from __future__ import annotations

from pathlib import Path

from app.controller.health import PROBES_FILE, load_health_probes
from app.controller.notify import WebhookNotifier
from app.controller.probe_runner import SchedulerProber
from app.controller.recovery import RULES_FILE, RecoveryRules, load_recovery_rules
from app.controller.schedulers.base import Scheduler
from app.controller.service import Controller
from app.db.engine import Database
from app.settings import ControllerScheduler, Settings


def recovery_rules_path(settings: Settings) -> Path:
    if settings.recovery_rules:
        return settings.recovery_rules
    candidate = settings.effective_rules_dir / "recovery.yaml"
    return candidate if candidate.is_file() else RULES_FILE


def health_probes_path(settings: Settings) -> Path:
    candidate = settings.effective_rules_dir / "probes.yaml"
    return candidate if candidate.is_file() else PROBES_FILE


def build_scheduler(settings: Settings) -> Scheduler:
    kind = ControllerScheduler(settings.controller_scheduler)
    if kind is ControllerScheduler.SLURM:
        from app.controller.schedulers.slurm import SlurmScheduler

        return SlurmScheduler(conf=str(settings.slurm_conf) if settings.slurm_conf else None,
                              probe_immediate_s=settings.slurm_probe_immediate_s,
                              probe_args=settings.slurm_probe_args)
    if kind is ControllerScheduler.KUBERNETES:
        from app.controller.schedulers.kubernetes import KubernetesScheduler

        return KubernetesScheduler.from_config(namespace=settings.kube_namespace)
    from app.controller.schedulers.local import LocalScheduler

    return LocalScheduler(settings.data_dir / "local-scheduler", settings.controller_local_nodes)


def build_prober(settings: Settings) -> SchedulerProber:
    return SchedulerProber(timeout_s=settings.controller_probe_timeout_s, host=settings.controller_probe_host,
                           port=settings.controller_probe_port, per_node=settings.controller_probe_gpus_per_node)


def build_notifier(settings: Settings) -> WebhookNotifier | None:
    if settings.notify_webhook_url is None:
        return None
    return WebhookNotifier(settings.notify_webhook_url.get_secret_value(), retries=settings.notify_webhook_retries,
                           timeout_s=settings.notify_webhook_timeout_s, backoff_s=settings.notify_webhook_backoff_s)


def build_controller(settings: Settings, db: Database, *, rules: RecoveryRules | None = None) -> Controller:
    scheduler = build_scheduler(settings)
    return Controller(db=db, rules=rules or load_recovery_rules(recovery_rules_path(settings)),
                      scheduler_for=lambda job: scheduler, prober=build_prober(settings),
                      notifier=build_notifier(settings), health_probes=load_health_probes(health_probes_path(settings)))
