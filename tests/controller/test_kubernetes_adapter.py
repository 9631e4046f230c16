"""The Kubernetes adapter, with the official client, against FakeKubeAPI (a local HTTP server
that stands in for the API server: no Kubernetes cluster can run here)."""

import json

import pytest
from kubernetes import client

from app.controller.schedulers.base import RestartSpec, SchedulerError
from app.controller.schedulers.kubernetes import RESTART_ANNOTATION, TAINT_KEY, KubernetesScheduler
from tests.controller.fake_kube import FakeKubeAPI, node, pod
from tests.controller.ports import free_port

LABEL = "training.kubeflow.org/job-name"


@pytest.fixture
def kube():
    api = FakeKubeAPI(free_port(50)).start()
    for i in range(1, 5):
        api.nodes[f"gpu-{i}"] = node(f"gpu-{i}")
    api.nodes["gpu-4"]["spec"]["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    api.pods = [pod(f"llama-worker-{i}", f"gpu-{i + 1}", {LABEL: "llama"}, "Failed" if i == 1 else "Running")
                for i in range(2)]
    api.custom["pytorchjobs/llama"] = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                       "metadata": {"name": "llama", "annotations": {}}, "spec": {}}
    yield api
    api.stop()


@pytest.fixture
def sched(kube):
    cfg = client.Configuration(host=kube.url)
    return KubernetesScheduler(client.ApiClient(cfg), namespace="default")


def test_reads_job_and_node_state(sched):
    info = sched.job("pytorchjob/llama")
    assert info.state == "FAILED" and info.nodes == ("gpu-1", "gpu-2")
    nodes = sched.nodes()
    assert set(nodes) == {"gpu-1", "gpu-2", "gpu-3", "gpu-4"} and not nodes["gpu-1"].drained


def test_drain_cordons_taints_with_a_reason_and_keeps_other_taints(sched, kube):
    sched.drain("gpu-4", reason="logdx: failed the node probe")
    obj = kube.nodes["gpu-4"]
    assert obj["spec"]["unschedulable"] is True
    assert {t["key"] for t in obj["spec"]["taints"]} == {"nvidia.com/gpu", TAINT_KEY}
    assert obj["metadata"]["annotations"]["logdx.io/reason"] == "logdx: failed the node probe"
    assert sched.nodes()["gpu-4"].drained and sched.nodes()["gpu-4"].reason.startswith("logdx")
    sched.drain("gpu-4", reason="again")  # idempotent: one taint of ours
    assert [t["key"] for t in kube.nodes["gpu-4"]["spec"]["taints"]].count(TAINT_KEY) == 1
    sched.resume("gpu-4", reason="repaired")
    assert kube.nodes["gpu-4"]["spec"]["unschedulable"] is False
    assert [t["key"] for t in kube.nodes["gpu-4"]["spec"]["taints"]] == ["nvidia.com/gpu"]


def test_requeue_annotates_the_pytorchjob_and_restarts_its_pods(sched, kube):
    sched.requeue("pytorchjob/llama", restart=RestartSpec(checkpoint="/ckpt/iter_0000020", checkpoint_step=20,
                                                          exclude=("gpu-2",)), delay_s=0)
    spec = json.loads(kube.custom["pytorchjobs/llama"]["metadata"]["annotations"][RESTART_ANNOTATION])
    assert spec["checkpoint_step"] == 20 and spec["exclude"] == ["gpu-2"]
    assert kube.pods == []
    methods = [(m, p) for m, p, *_ in kube.requests]
    assert ("DELETE", "/api/v1/namespaces/default/pods") in methods


def test_bad_job_ids_and_api_errors_are_scheduler_errors(sched):
    with pytest.raises(SchedulerError, match="pytorchjob/NAME"):
        sched.job("deployment/x")
    with pytest.raises(SchedulerError, match="404"):
        sched.drain("gpu-99", reason="x")


def test_requeue_keeps_a_pytorchjob_off_the_excluded_nodes_by_node_affinity(sched, kube):
    own = {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["H100"]}
    kube.custom["pytorchjobs/llama"]["spec"] = {"pytorchReplicaSpecs": {
        "Master": {"replicas": 1, "template": {"spec": {"containers": [{"name": "pytorch"}]}}},
        "Worker": {"replicas": 1, "template": {"spec": {"containers": [{"name": "pytorch"}], "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [own]}]}}}}}}}}
    sched.requeue("pytorchjob/llama", restart=RestartSpec(exclude=("gpu-2",)))
    sched.requeue("pytorchjob/llama", restart=RestartSpec(exclude=("gpu-3",)))  # a second bad node joins the first
    specs = kube.custom["pytorchjobs/llama"]["spec"]["pytorchReplicaSpecs"]
    not_in = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["gpu-2", "gpu-3"]}

    def terms(role):
        aff = specs[role]["template"]["spec"]["affinity"]["nodeAffinity"]
        return aff["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]

    assert terms("Master") == [{"matchExpressions": [not_in]}]
    assert terms("Worker") == [{"matchExpressions": [own, not_in]}]  # the job's own affinity still holds
    assert specs["Worker"]["template"]["spec"]["containers"] == [{"name": "pytorch"}] and kube.pods == []
