"""Kubernetes through the official client, kept thin: cordon and taint a node with a reason,
restart a job's pods (the training operator recreates them) and record the restart on the
PyTorchJob or JobSet object, read node and pod state.

A job id is `<kind>/<name>`: `pytorchjob/llama-70b`, `jobset/llama-70b` or `pods/<label
selector>`. The pods of a PyTorchJob carry `training.kubeflow.org/job-name=<name>`, those of a
JobSet `jobset.sigs.k8s.io/jobset-name=<name>`. Drained nodes keep new pods away through the
NoSchedule taint; the restart spec (checkpoint, skipped batches, excluded nodes) is written as an
annotation the launcher reads; on a PyTorchJob the excluded nodes are also kept away by a required
node affinity (`kubernetes.io/hostname NotIn`) on its replica templates. Not done here: probes (a
pod per node), backoff (pods are deleted at once; the delay is only in the annotation), exclusion
on JobSets (their replicated jobs are immutable) and `pods/` selectors (no template to change),
stack dumps.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict

from app.controller.schedulers.base import JobInfo, NodeInfo, RestartSpec, SchedulerError

TAINT_KEY = "logdx.io/faulty"
REASON_ANNOTATION = "logdx.io/reason"
RESTART_ANNOTATION = "logdx.io/restart"
_KINDS = {
    "pytorchjob": ("kubeflow.org", "v1", "pytorchjobs", "training.kubeflow.org/job-name"),
    "jobset": ("jobset.x-k8s.io", "v1alpha2", "jobsets", "jobset.sigs.k8s.io/jobset-name"),
}


class KubernetesScheduler:
    name = "kubernetes"

    def __init__(self, api_client, *, namespace: str = "default") -> None:  # noqa: ANN001
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.namespace = namespace

    @classmethod
    def from_config(cls, *, namespace: str = "default") -> KubernetesScheduler:
        """In-cluster service account, else ~/.kube/config."""
        from kubernetes import client, config

        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        return cls(client.ApiClient(), namespace=namespace)

    def _call(self, fn, *args, **kwargs):  # noqa: ANN001, ANN202
        from kubernetes.client.exceptions import ApiException

        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            raise SchedulerError(f"kubernetes {fn.__name__}: {exc.status} {exc.reason}: {(exc.body or '')[:300]}") from exc

    def _selector(self, job_id: str) -> tuple[str, str | None, str]:
        kind, _, name = job_id.partition("/")
        if kind == "pods" and name:
            return kind, None, name
        if kind not in _KINDS or not name:
            raise SchedulerError(f"job id must be pytorchjob/NAME, jobset/NAME or pods/SELECTOR, got {job_id!r}")
        return kind, name, f"{_KINDS[kind][3]}={name}"

    def job(self, job_id: str) -> JobInfo:
        kind, name, selector = self._selector(job_id)
        pods = self._call(self.core.list_namespaced_pod, self.namespace, label_selector=selector).items
        phases = [p.status.phase if p.status else "Unknown" for p in pods]
        state = ("FAILED" if "Failed" in phases else "RUNNING" if "Running" in phases
                 else "PENDING" if "Pending" in phases or not phases else "COMPLETED")
        nodes = tuple(sorted({p.spec.node_name for p in pods if p.spec and p.spec.node_name}))
        restarts = sum(cs.restart_count for p in pods if p.status and p.status.container_statuses
                       for cs in p.status.container_statuses)
        return JobInfo(job_id=job_id, state=state, nodes=nodes, restarts=restarts,
                       raw={"pods": [p.metadata.name for p in pods], "phases": phases})

    def nodes(self) -> dict[str, NodeInfo]:
        out = {}
        for node in self._call(self.core.list_node).items:
            ready = any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or [])) \
                if node.status else False
            cordoned = bool(node.spec and node.spec.unschedulable)
            state = ("CORDON+" if cordoned else "") + ("IDLE" if ready else "NOTREADY")
            reason = (node.metadata.annotations or {}).get(REASON_ANNOTATION)
            out[node.metadata.name] = NodeInfo(node.metadata.name, state, reason)
        return out

    def _taints(self, name: str) -> list[dict]:
        node = self._call(self.core.read_node, name)
        return [t.to_dict() for t in (node.spec.taints or [])] if node.spec else []

    def drain(self, node: str, *, reason: str) -> None:
        """Cordon, taint NoSchedule and annotate the reason (running pods are left to the job's restart)."""
        taints = [t for t in self._taints(node) if t.get("key") != TAINT_KEY]
        taints.append({"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"})
        body = {"spec": {"unschedulable": True, "taints": [_taint(t) for t in taints]},
                "metadata": {"annotations": {REASON_ANNOTATION: reason}}}
        self._call(self.core.patch_node, node, body)

    def resume(self, node: str, *, reason: str) -> None:
        taints = [_taint(t) for t in self._taints(node) if t.get("key") != TAINT_KEY]
        body = {"spec": {"unschedulable": False, "taints": taints},
                "metadata": {"annotations": {REASON_ANNOTATION: None}}}
        self._call(self.core.patch_node, node, body)

    def requeue(self, job_id: str, *, restart: RestartSpec, delay_s: float = 0.0) -> None:
        """Record the restart on the job object, then delete its pods; the operator recreates them
        (the delay, if any, is left to the operator's own backoff)."""
        kind, name, selector = self._selector(job_id)
        spec = json.dumps({**asdict(restart), "delay_s": delay_s})
        if name is not None:
            group, version, plural, _ = _KINDS[kind]
            patch: dict = {"metadata": {"annotations": {RESTART_ANNOTATION: spec}}}
            if kind == "pytorchjob" and restart.exclude:
                obj = self._call(self.custom.get_namespaced_custom_object, group, version, self.namespace,
                                 plural, name)
                patch["spec"] = {"pytorchReplicaSpecs": excluding_affinity(obj, restart.exclude)}
            self._call(self.custom.patch_namespaced_custom_object, group, version, self.namespace, plural, name,
                       patch)
        self._call(self.core.delete_collection_namespaced_pod, self.namespace, label_selector=selector)

    def probe_command(self, nodes: Sequence[str], argv: Sequence[str]) -> list[str] | None:
        return None


def _taint(t: dict) -> dict:
    return {k: t[k] for k in ("key", "value", "effect") if t.get(k) is not None}


def excluding_affinity(pytorchjob: dict, exclude: Sequence[str]) -> dict:
    """The merge patch of a PyTorchJob's replica specs that keeps their pods off `exclude`: a
    required `kubernetes.io/hostname NotIn` node affinity. Node selector terms are ORed, so the
    expression joins every existing term (the job's own affinity still holds)."""
    expression = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": sorted(set(exclude))}
    out: dict = {}
    for role, replica in ((pytorchjob.get("spec") or {}).get("pytorchReplicaSpecs") or {}).items():
        pod_spec = ((replica or {}).get("template") or {}).get("spec") or {}
        node_aff = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
        required = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
        terms = [dict(t) for t in required.get("nodeSelectorTerms") or [{}]]
        for term in terms:
            kept = [e for e in term.get("matchExpressions") or []
                    if not (e.get("key") == expression["key"] and e.get("operator") == "NotIn")]
            earlier = [v for e in term.get("matchExpressions") or []
                       if e.get("key") == expression["key"] and e.get("operator") == "NotIn" for v in e.get("values", [])]
            term["matchExpressions"] = kept + [{**expression, "values": sorted(set(earlier) | set(exclude))}]
        out[role] = {"template": {"spec": {"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}}}}
    return out
