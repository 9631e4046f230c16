from pathlib import Path

import pytest
import yaml

from app.controller.health import ProbeFileError, load_health_probes, run_health_probe

PROBES = {p.id: p for p in load_health_probes()}


def test_shipped_probes_load_and_their_examples_hold():
    assert {"gpu-health", "dcgm-diag", "ib-port", "storage-rw"} <= set(PROBES)


def test_storage_probe_really_writes_and_reads(tmp_path):
    ok = run_health_probe(PROBES["storage-rw"], env={"LOGDX_PROBE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert ok.status == "pass", ok.output_tail
    ro = tmp_path / "ro"
    ro.mkdir()
    bad = run_health_probe(PROBES["storage-rw"], env={"LOGDX_PROBE_DIR": str(ro / "missing"), "PATH": "/usr/bin:/bin"})
    assert bad.status == "fail" and bad.exit_code != 0


def test_missing_tool_is_unavailable_not_failed():
    probe = PROBES["dcgm-diag"].model_copy(update={"command": "logdx-no-such-tool"})
    assert run_health_probe(probe).status == "unavailable"


def test_timeout_is_reported(tmp_path):
    probe = PROBES["storage-rw"].model_copy(update={"command": "sleep", "args": ["5"], "timeout_s": 0.5})
    assert run_health_probe(probe).status == "timeout"


def test_a_probe_file_whose_examples_disagree_is_refused(tmp_path):
    data = yaml.safe_load(Path("rules/probes.yaml").read_text())
    data["probes"][2]["examples"]["fail"].append("State: Active")
    path = tmp_path / "probes.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ProbeFileError, match="ib-port"):
        load_health_probes(path)
