from __future__ import annotations

import posixpath
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Path

from app.api.deps import Admin, DbDep, Engineer, Scheduler, ServicesDep
from app.api.openapi import ERRORS
from app.auth.models import TokenRole
from app.controller import store
from app.controller.hosts import map_hosts
from app.controller.schemas import (
    ClusterControlIn, ClusterControlOut, NodeResumeIn, NodeResumeOut, ProbeList, ProbeOut, ProbeRequest, RecoveryList, RecoveryOut,
    RecoverRequest,
)
from app.controller.service import Controller
from app.errors import Forbidden, InvalidInput, NotFound
from app.jobs.service import get_job
from app.schemas_common import _NO_CONTROL, ObjectId

HostName = Annotated[str, Path(min_length=1, max_length=255, pattern=_NO_CONTROL, description="Node name (or its FQDN)")]
ClusterName = Annotated[str, Path(min_length=1, max_length=128, pattern=_NO_CONTROL, description="Cluster name")]

router = APIRouter(tags=["controller"], responses=ERRORS)


def get_controller(services: ServicesDep) -> Controller:
    """Built on first use: a server that never recovers never loads the recovery policy."""
    controller = getattr(services, "controller", None)
    if controller is None:
        from app.controller.factory import build_controller

        controller = build_controller(services.settings, services.db)
        services.controller = controller
    return controller


ControllerDep = Annotated[Controller, Depends(get_controller)]


def check_checkpoint_dir(path: str, *, roots: list[str]) -> None:
    """A scheduler token (the epilog, any job's owner) names where the job restarts from: it must
    lie under a configured root, or a job could be restarted from another's checkpoints (or a
    path the controller then reads). `..` is resolved first; symlinks are the cluster's."""
    normal = posixpath.normpath(path)
    if not normal.startswith("/"):
        raise Forbidden(f"checkpoint_dir {path!r} is not an absolute path", code="checkpoint_dir_refused",
                        detail={"checkpoint_dir": path})
    for root in roots:
        root = posixpath.normpath(root)
        if normal == root or normal.startswith(root.rstrip("/") + "/"):
            return
    if not roots:
        reason = "no LOGDX_CONTROLLER_CHECKPOINT_ROOTS are configured, so a scheduler token may not name one"
    else:
        reason = f"it is not under {', '.join(roots)} (LOGDX_CONTROLLER_CHECKPOINT_ROOTS)"
    raise Forbidden(f"checkpoint_dir {path!r} refused: {reason}; leave it out to use what the scheduler "
                    "knows, or recover with an engineer token", code="checkpoint_dir_refused",
                    detail={"checkpoint_dir": path, "roots": list(roots)})


def _recovery_out(row) -> RecoveryOut:  # noqa: ANN001
    return RecoveryOut.model_validate(row, from_attributes=True)


def _probe_out(row) -> ProbeOut:  # noqa: ANN001
    return ProbeOut.model_validate(row, from_attributes=True)


@router.post("/v1/jobs/{job_id}/recover", response_model=RecoveryOut)
def recover(job_id: ObjectId, controller: ControllerDep, services: ServicesDep, principal: Scheduler,
            body: RecoverRequest | None = None,
            idempotency_key: Annotated[str | None, Header(min_length=1, max_length=192, pattern=_NO_CONTROL)] = None,
            ) -> RecoveryOut:
    """Plan and carry out the recovery of the job's failure (dry-run unless the cluster is
    enabled). Synchronous: a probe takes up to a few timeouts. A repeated request with the same
    idempotency key (default: job + diagnosis) returns the first run and acts no more."""
    body = body or RecoverRequest()
    if body.checkpoint_dir is not None and principal.role is TokenRole.SCHEDULER:
        check_checkpoint_dir(body.checkpoint_dir, roots=services.settings.controller_checkpoint_roots)
    run = controller.recover(job_id=job_id, actor=f"api:{principal.name}", diagnosis_id=body.diagnosis_id,
                             idempotency_key=body.idempotency_key or idempotency_key,
                             checkpoint_dir=body.checkpoint_dir, dry_run=body.dry_run)
    return _recovery_out(run)


@router.get("/v1/jobs/{job_id}/recoveries", response_model=RecoveryList)
def list_recoveries(job_id: ObjectId, db: DbDep, _: Engineer) -> RecoveryList:
    """The job's recovery history: one run per handled failure, with its plan and outcome."""
    with db.transaction() as session:
        get_job(session=session, job_id=job_id)
        return RecoveryList(items=[_recovery_out(r) for r in store.list_runs(session=session, job_id=job_id)])


@router.get("/v1/jobs/{job_id}/probes", response_model=ProbeList)
def list_job_probes(job_id: ObjectId, db: DbDep, _: Engineer) -> ProbeList:
    with db.transaction() as session:
        get_job(session=session, job_id=job_id)
        return ProbeList(items=[_probe_out(r) for r in store.list_probes(session=session, job_id=job_id)])


@router.get("/v1/probes", response_model=ProbeList)
def list_probes(db: DbDep, _: Engineer) -> ProbeList:
    """The newest probe runs (50)."""
    with db.transaction() as session:
        return ProbeList(items=[_probe_out(r) for r in store.list_probes(session=session)])


@router.post("/v1/probes", response_model=ProbeOut, status_code=201)
def run_probe(body: ProbeRequest, controller: ControllerDep, db: DbDep, _: Admin) -> ProbeOut:
    """Run the two-round allgather probe on the given nodes now and store the result."""
    scheduler = controller.scheduler_for(None)
    known = scheduler.nodes()
    names = map_hosts(body.hosts, known)  # node[1-4], node3.cluster.example: the scheduler's node1..4, node3
    if names.unknown:
        raise InvalidInput(f"hosts unknown to the {scheduler.name} scheduler: {list(names.unknown)[:10]}",
                           detail={"unknown": list(names.unknown)[:100]})
    if controller.prober is None:
        raise NotFound("no prober is configured")
    hosts = names.known
    report = controller.prober(scheduler, hosts, suspects=map_hosts(body.suspects, known).known)
    with db.transaction() as session:
        if body.job_id is not None:
            get_job(session=session, job_id=body.job_id)
        return _probe_out(store.save_probe(session=session, cluster=body.cluster, job_id=body.job_id,
                                           hosts=hosts, report=report))


@router.post("/v1/controller/nodes/{host}/resume", response_model=NodeResumeOut)
def resume_node(host: HostName, body: NodeResumeIn, controller: ControllerDep, principal: Admin) -> NodeResumeOut:
    """A repaired node back into service: resumed in the scheduler (Slurm `State=RESUME`, a
    Kubernetes node uncordoned) and its host incidents in the cluster resolved, so it is no longer
    a repeat offender."""
    return NodeResumeOut(**controller.resume_node(cluster=body.cluster, host=host, actor=f"api:{principal.name}",
                                                  reason=body.reason))


@router.get("/v1/clusters/{cluster}/controller", response_model=ClusterControlOut)
def get_cluster_control(cluster: ClusterName, db: DbDep, _: Engineer) -> ClusterControlOut:
    with db.transaction() as session:
        row = store.cluster_control(session=session, cluster=cluster)
        if row is None:
            raise NotFound(f"cluster {cluster!r} has no controller settings (actions disabled: dry-run)",
                           detail={"cluster": cluster})
        return ClusterControlOut.model_validate(row, from_attributes=True)


@router.put("/v1/clusters/{cluster}/controller", response_model=ClusterControlOut)
def put_cluster_control(cluster: ClusterName, body: ClusterControlIn, db: DbDep, principal: Admin) -> ClusterControlOut:
    """Enable (or disable) real controller actions on a cluster; until then every recovery is a dry run."""
    with db.transaction() as session:
        row = store.set_cluster_control(session=session, cluster=cluster, actions_enabled=body.actions_enabled,
                                        actor=f"api:{principal.name}", node_count=body.node_count)
        return ClusterControlOut.model_validate(row, from_attributes=True)


def start_live_watch(services):  # noqa: ANN001, ANN201
    """The live-watch loop as an asyncio task when LOGDX_CONTROLLER_LIVE_WATCH is on, else None."""
    if not services.settings.controller_live_watch:
        return None
    import asyncio
    import time

    from app.controller.live import LiveMonitor, run_monitor

    stall = get_controller(services).rules.defaults.stall
    monitor = LiveMonitor(db=services.db, store=services.store, ruleset=services.pipeline.ruleset,
                          factor=stall.factor, floor_s=stall.floor_s, straggler_factor=stall.straggler_factor,
                          startup_s=stall.startup_s, clock=time.monotonic)
    services.live_monitor = monitor
    return asyncio.create_task(run_monitor(monitor, interval_s=services.settings.controller_live_interval_s,
                                           worker=services.worker, get_controller=lambda: get_controller(services)))
