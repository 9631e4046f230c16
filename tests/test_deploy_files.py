"""The deployment files are well-formed: the Kubernetes example loads into the official client's
model classes with no field dropped (a typo'd or misplaced key would be), the systemd unit passes
`systemd-analyze verify`, and the Dockerfile, the entrypoint and the manifests agree on the port,
the user, the data directory and the health endpoints. The entrypoint itself runs in
tests/test_packaging.py, from an installed wheel."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
MANIFEST = DEPLOY / "kubernetes" / "logdx.yaml"


def _documents() -> list[dict]:
    return [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d is not None]


def _model_dropped(original, serialized, path="") -> list[str]:
    """Keys of `original` that the model did not keep (unknown to the API: typos, wrong level)."""
    if isinstance(original, dict):
        if not isinstance(serialized, dict):
            return [path or "/"]
        out = []
        for key, value in original.items():
            if key not in serialized:
                out.append(f"{path}/{key}")
            else:
                out += _model_dropped(value, serialized[key], f"{path}/{key}")
        return out
    if isinstance(original, list):
        if not isinstance(serialized, list) or len(serialized) != len(original):
            return [path]
        return [m for i, (a, b) in enumerate(zip(original, serialized, strict=True))
                for m in _model_dropped(a, b, f"{path}[{i}]")]
    return []


def test_the_kubernetes_example_has_each_object_and_loads_into_the_api_models():
    client = pytest.importorskip("kubernetes.client")
    api = client.ApiClient()
    docs = _documents()
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["CronJob", "Deployment", "PersistentVolumeClaim", "Service"]
    for doc in docs:
        model = f"V1{doc['kind']}"
        obj = api._ApiClient__deserialize(doc, model)  # the client's own loader (raises on a missing required field)
        assert type(obj).__name__ == model
        assert _model_dropped(doc, api.sanitize_for_serialization(obj)) == [], doc["kind"]
        assert doc["metadata"]["namespace"] == "logdx"


def test_the_kubernetes_objects_fit_together():
    by_kind = {d["kind"]: d for d in _documents()}
    deploy, service, pvc, cron = (by_kind[k] for k in ("Deployment", "Service", "PersistentVolumeClaim", "CronJob"))
    pod = deploy["spec"]["template"]
    assert deploy["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    container = pod["spec"]["containers"][0]
    port = next(p for p in container["ports"] if p["name"] == "http")
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert str(port["containerPort"]) == env["LOGDX_PORT"] == "8000"
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    claims = {v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"]}
    job_pod = cron["spec"]["jobTemplate"]["spec"]["template"]
    assert claims == {v["persistentVolumeClaim"]["claimName"] for v in job_pod["spec"]["volumes"]} \
        == {pvc["metadata"]["name"]}
    mount = container["volumeMounts"][0]["mountPath"]
    assert env["LOGDX_DATA_DIR"] == mount
    job = job_pod["spec"]["containers"][0]
    assert job["args"][0] == "relabel" and "--only-stale" in job["args"]
    assert {e["name"]: e.get("value") for e in job["env"]}["LOGDX_DATA_DIR"] == mount
    # the re-labeling job reads the stored logs: it must land on the server's node (ReadWriteOnce)
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    term = job_pod["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["labelSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    # the image's unprivileged user, as the Dockerfile creates it
    for spec in (pod["spec"], job_pod["spec"]):
        assert spec["securityContext"]["runAsUser"] == 10001 and spec["securityContext"]["runAsNonRoot"]


def test_the_relabel_arguments_are_options_of_logdx_relabel():
    from click.testing import CliRunner

    from app.relabel.cli import relabel

    job = next(d for d in _documents() if d["kind"] == "CronJob")
    args = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    options = {opt for p in relabel.params for opt in p.opts}
    assert [a for a in args[1:] if a.startswith("--")] and all(a in options for a in args[1:] if a.startswith("--"))
    assert CliRunner().invoke(relabel, ["--help"]).exit_code == 0


def test_the_dockerfile_builds_in_two_stages_and_runs_unprivileged_with_a_healthcheck():
    text = (REPO / "Dockerfile").read_text()
    stages = re.findall(r"^FROM \S+ AS (\w+)", text, flags=re.M)
    assert stages == ["build", "runtime"]
    runtime = text.split("AS runtime", 1)[1]
    assert "COPY --from=build /dist/" in runtime and "COPY app/" not in runtime  # only the wheel crosses over
    assert "_shapescan" in text.split("AS runtime", 1)[0]  # the build fails without the C scan loop
    assert re.search(r"^USER 10001", runtime, flags=re.M)
    assert re.search(r"^HEALTHCHECK .*\n?.*/healthz", runtime, flags=re.M)
    assert 'ENTRYPOINT ["logdx-entrypoint"]' in runtime
    assert "COPY deploy/entrypoint.sh /usr/local/bin/logdx-entrypoint" in runtime
    # every file the build stage copies is in the build context (.dockerignore keeps them)
    for src in re.findall(r"^COPY (?!--)(.+) \S+$", text.split("AS runtime", 1)[0], flags=re.M):
        for name in src.split():
            assert (REPO / name).exists(), name
    ignored = (REPO / ".dockerignore").read_text().split()
    assert "!tests/data/metric_lines.txt" in ignored and "!tests/data/normal_lines.txt" in ignored


def test_the_entrypoint_is_a_posix_shell_script():
    script = DEPLOY / "entrypoint.sh"
    assert script.stat().st_mode & 0o111, "not executable"
    assert script.read_text().startswith("#!/bin/sh\n")
    shell = shutil.which("dash") or shutil.which("sh")
    out = subprocess.run([shell, "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_the_systemd_unit_verifies(tmp_path):
    unit = (DEPLOY / "logdx.service").read_text()
    assert "ExecStart=/opt/logdx/bin/logdx-entrypoint" in unit
    # verify checks that ExecStart exists: point it at the script the README installs there
    local = tmp_path / "logdx.service"
    local.write_text(unit.replace("/opt/logdx/bin/logdx-entrypoint", str(DEPLOY / "entrypoint.sh")))
    out = subprocess.run(["systemd-analyze", "verify", str(local)], capture_output=True, text=True, timeout=60)
    problems = [ln for ln in (out.stdout + out.stderr).splitlines() if "logdx.service" in ln]
    assert out.returncode == 0 and problems == [], out.stdout + out.stderr
