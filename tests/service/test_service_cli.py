from __future__ import annotations

import click
from click.testing import CliRunner

from app.auth.service import authenticate
from app.db.engine import Database
from app.service_cli import main, register


def test_token_create_prints_a_working_token(tmp_path, monkeypatch):
    monkeypatch.setenv("LOGDX_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("LOGDX_DATABASE_URL", raising=False)
    result = CliRunner().invoke(main, ["token", "create", "--role", "engineer", "--name", "alice"])
    assert result.exit_code == 0, result.output
    token = result.stdout.strip().splitlines()[-1]
    assert token.startswith("ldx_")
    db = Database(f"sqlite:///{tmp_path / 'logdx.db'}")
    principal = db.run(authenticate, token=token)
    assert (principal.name, principal.role.value) == ("alice", "engineer")
    listed = CliRunner().invoke(main, ["token", "list"])
    assert "alice" in listed.stdout and token not in listed.stdout
    assert CliRunner().invoke(main, ["token", "revoke", str(principal.token_id)]).exit_code == 0
    assert db.run(authenticate, token=token) is None
    assert CliRunner().invoke(main, ["token", "revoke", "999"]).exit_code == 2
    db.dispose()


def test_bad_role_is_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.setenv("LOGDX_DATA_DIR", str(tmp_path))
    result = CliRunner().invoke(main, ["token", "create", "--role", "root"])
    assert result.exit_code == 2


def test_register_mounts_serve_and_token():
    cli = click.Group("logdx")
    register(cli)
    assert {"serve", "worker", "token"} <= set(cli.commands)
    assert "--port" in CliRunner().invoke(cli, ["serve", "--help"]).output


def test_worker_refuses_sqlite(tmp_path, monkeypatch):
    monkeypatch.setenv("LOGDX_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("LOGDX_DATABASE_URL", raising=False)
    result = CliRunner().invoke(main, ["worker"])
    assert result.exit_code == 2 and "postgresql" in result.stderr


def test_token_list_has_a_header_and_says_when_there_are_none(tmp_path, monkeypatch):
    monkeypatch.setenv("LOGDX_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("LOGDX_DATABASE_URL", raising=False)
    empty = CliRunner().invoke(main, ["token", "list"])
    assert empty.exit_code == 0 and empty.stdout == "" and "no tokens yet" in empty.stderr
    CliRunner().invoke(main, ["token", "create", "--role", "scheduler", "--name", "slurm"])
    scoped = CliRunner().invoke(main, ["token", "create", "--role", "scheduler", "--name", "c1",
                                       "--cluster", "c1", "--cluster", "c0"])
    assert scoped.exit_code == 0 and "clusters c0, c1" in scoped.stderr
    refused = CliRunner().invoke(main, ["token", "create", "--role", "engineer", "--cluster", "c1"])
    assert refused.exit_code != 0 and "only scheduler tokens" in refused.output
    lines = CliRunner().invoke(main, ["token", "list"]).stdout.splitlines()
    assert lines[0].split("\t") == ["id", "role", "state", "name", "created", "clusters"]
    assert lines[1].split("\t")[1:4] == ["scheduler", "active", "slurm"]
    assert lines[1].split("\t")[5] == "*" and lines[2].split("\t")[5] == "c0,c1"
