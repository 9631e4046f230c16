import json

from click.testing import CliRunner

from app.cli import cli
from tests.controller.ports import free_port


def test_probe_command_finds_an_injected_fault_and_exits_1():
    result = CliRunner().invoke(cli, ["probe", "--hosts", "a,b,c,d", "--timeout", "5", "--inject", "b=corrupt",
                                      "--store", f"127.0.0.1:{free_port()}", "--json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.output)
    assert report["faulty"] == ["b"] and report["verdict"] == "faulty"


def test_probe_and_recover_refuse_bad_input_clearly(tmp_path, monkeypatch):
    result = CliRunner().invoke(cli, ["probe", "--hosts", "a"])
    assert result.exit_code == 2 and "at least two" in result.output
    monkeypatch.setenv("LOGDX_DATA_DIR", str(tmp_path))
    result = CliRunner().invoke(cli, ["recover", "42"])
    assert result.exit_code == 2 and "job 42 does not exist" in result.output
