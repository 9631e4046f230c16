"""Controller commands of the `logdx` CLI: `logdx probe`, `logdx recover`, `logdx watch`, `logdx restart-args`."""

from __future__ import annotations

import json
import sys

import click

EXIT_BAD_INPUT = 2


def _fail(message: str) -> None:
    click.echo(f"logdx: {message}", err=True)
    sys.exit(EXIT_BAD_INPUT)


def _report_lines(report) -> list[str]:  # noqa: ANN001
    lines = [f"verdict: {report.verdict.value} ({report.reason})",
             f"faulty: {', '.join(report.faulty) or '-'}   slow: {', '.join(report.slow) or '-'}",
             f"time: {report.duration_s:.1f} s (rounds: {', '.join(f'{t:.1f}' for t in report.round_s)})"]
    for i, rnd in enumerate(report.rounds, 1):
        for g in rnd:
            state = "ok " if g["ok"] else "FAIL"
            lines.append(f"  round {i} {state} {','.join(g['members'])} {g['elapsed_s']:.2f}s {g['error'][:100]}")
    return lines


@click.command()
@click.option("--hosts", required=True, help="Comma-separated node names to probe.")
@click.option("--suspect", "suspects", multiple=True, help="A node the evidence names (probed first).")
@click.option("--scheduler", type=click.Choice(["local", "slurm"]), default="local", show_default=True,
              help="local: one worker process per name on this machine; slurm: workers through srun.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(5, 3600), default=30.0, show_default=True)
@click.option("--bytes", "nbytes", type=click.IntRange(4, 1 << 30), default=1 << 20, show_default=True,
              help="Allgather payload per rank.")
@click.option("--store", "store_addr", default="127.0.0.1:0", show_default=True,
              help="HOST:PORT the controller's rendezvous store listens on (port 0: any).")
@click.option("--inject", multiple=True,
              help="NODE=FAULT or NODE:LOCAL_RANK=FAULT (exit_before|exit_mid|hang|corrupt|slow), for demos.")
@click.option("--gpus-per-node", "per_node", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Probe ranks per node, one per GPU (on CPU: processes).")
@click.option("--health", is_flag=True, help="Also run the health probes of rules/probes.yaml on each host.")
@click.option("--json", "as_json", is_flag=True)
def probe(hosts: str, suspects: tuple[str, ...], scheduler: str, timeout_s: float, nbytes: int,
          store_addr: str, inject: tuple[str, ...], per_node: int, health: bool, as_json: bool) -> None:
    """Find faulty nodes with the two-round pairwise allgather test."""
    from app.controller.probe_runner import CommandProbeRunner, LocalProbeCluster

    names = [h.strip() for h in hosts.split(",") if h.strip()]
    if len(names) < 2:
        _fail("--hosts needs at least two node names")
    faults = dict(item.split("=", 1) for item in inject if "=" in item)
    host, _, port = store_addr.rpartition(":")
    if not port.isdigit():
        _fail(f"--store must be HOST:PORT, got {store_addr!r}")
    if scheduler == "local":
        with LocalProbeCluster(names, timeout_s=timeout_s, nbytes=nbytes, faults=faults, port=int(port),
                               per_node=per_node) as cluster:
            cluster.wait_ready()
            report = cluster.probe(suspects=suspects)
    else:
        from app.controller.schedulers.slurm import SlurmScheduler

        env = {"LOGDX_PROBE_FAULTS": ",".join(inject)} if inject else None
        runner = CommandProbeRunner(SlurmScheduler().probe_command, timeout_s=timeout_s, nbytes=nbytes,
                                    host=host or "127.0.0.1", port=int(port), env=env, per_node=per_node)
        report = runner.probe(names, suspects=suspects)
    out = report.to_dict()
    unhealthy = False
    if health:
        from dataclasses import asdict

        from app.controller.health import load_health_probes, run_health_probe

        launcher = None
        if scheduler == "slurm":
            from app.controller.schedulers.slurm import SlurmScheduler

            launcher = SlurmScheduler().probe_command
        checks = [run_health_probe(p, node=n if launcher else None, launcher=launcher)
                  for n in (names if launcher else names[:1]) for p in load_health_probes()]
        out["health"] = [asdict(c) for c in checks]
        unhealthy = any(c.status in ("fail", "timeout") for c in checks)
    if as_json:
        click.echo(json.dumps(out, indent=1))
    else:
        click.echo("\n".join(_report_lines(report)))
        for c in out.get("health", []):
            click.echo(f"  health {c['probe_id']} {c['node'] or 'local'}: {c['status']} ({c['duration_s']:.1f} s)")
    sys.exit(0 if not report.faulty and not unhealthy else 1)


@click.command()
@click.argument("job_id", type=int)
@click.option("--act/--dry-run", "act", default=None,
              help="Default: act only where an admin enabled the job's cluster.")
@click.option("--diagnosis", "diagnosis_id", type=int, default=None)
@click.option("--checkpoint-dir", default=None, help="Where the job saves checkpoints.")
@click.option("--key", "idempotency_key", default=None, help="Idempotency key (default: job + diagnosis).")
def recover(job_id: int, act: bool | None, diagnosis_id: int | None, checkpoint_dir: str | None,
            idempotency_key: str | None) -> None:
    """Recover stored job JOB_ID from its newest diagnosis (settings from LOGDX_*)."""
    from app.controller.factory import build_controller
    from app.db.engine import Database
    from app.db.migrate import upgrade_to_head
    from app.errors import AppError
    from app.service_cli import _settings

    settings = _settings()
    db = Database(settings.effective_database_url)
    upgrade_to_head(db.engine)
    try:
        run = build_controller(settings, db).recover(
            job_id=job_id, actor="cli", diagnosis_id=diagnosis_id, checkpoint_dir=checkpoint_dir,
            idempotency_key=idempotency_key, dry_run=None if act is None else not act)
    except AppError as exc:
        _fail(exc.message)
    from app.controller.schemas import RecoveryOut

    click.echo(RecoveryOut.model_validate(run, from_attributes=True).model_dump_json(indent=1))


@click.command()
@click.argument("log", type=click.Path(dir_okay=False))
@click.option("--factor", type=click.FloatRange(1.5, 1000), default=5.0, show_default=True,
              help="Stalled after this many typical step times without progress.")
@click.option("--floor", "floor_s", type=click.FloatRange(0.1, 86400), default=120.0, show_default=True,
              help="Never call a stall before this many seconds.")
@click.option("--straggler-factor", type=click.FloatRange(1.1, 100), default=2.0, show_default=True)
@click.option("--interval", type=click.FloatRange(0.05, 60), default=1.0, show_default=True,
              help="Seconds between checks of the file.")
@click.option("--exec", "on_alert", default=None,
              help="Shell command run on each alert, with the alert as JSON in $LOGDX_ALERT.")
@click.option("--exit-on-stall", is_flag=True, help="Exit 1 at the first stall (after --exec).")
@click.option("--max-seconds", type=click.FloatRange(0, None), default=None, help="Stop watching after this long.")
@click.option("--rules", "rules_dir", type=click.Path(file_okay=False), default=None)
def watch(log: str, factor: float, floor_s: float, straggler_factor: float, interval: float, on_alert: str | None,
          exit_on_stall: bool, max_seconds: float | None, rules_dir: str | None) -> None:
    """Watch a growing LOG: report stalls and stragglers (JSON lines) while the job runs."""
    import os
    import subprocess
    import time
    from pathlib import Path

    from app.controller.watch import LiveWatcher
    from app.core.rules import RuleError, load_rules

    try:
        watcher = LiveWatcher(load_rules(rules_dir), factor=factor, floor_s=floor_s,
                              straggler_factor=straggler_factor)
    except RuleError as exc:
        _fail(f"bad rules: {exc}")
    path = Path(log)
    start = time.monotonic()
    pos, partial = 0, b""
    watcher.feed([], start)  # the watch starts the growth clock
    watcher.last_growth_at = start
    while max_seconds is None or time.monotonic() - start < max_seconds:
        now = time.monotonic()
        lines: list[str] = []
        try:
            size = path.stat().st_size
            if size < pos:  # truncated or replaced: start over
                pos, partial = 0, b""
            if size > pos:
                with path.open("rb") as f:
                    f.seek(pos)
                    data = f.read(size - pos)
                pos += len(data)
                chunks = (partial + data).split(b"\n")
                partial = chunks.pop()
                lines = [c.decode("utf-8", "replace").rstrip("\r") for c in chunks]
        except FileNotFoundError:
            pass
        alerts = watcher.feed(lines, now) + watcher.tick(now)
        for alert in alerts:
            record = {"kind": alert.kind, "after_s": round(alert.at - start, 3), "message": alert.message,
                      **alert.details}
            click.echo(json.dumps(record))
            if on_alert:
                subprocess.run(on_alert, shell=True, env={**os.environ, "LOGDX_ALERT": json.dumps(record)})
            if alert.kind == "stall" and exit_on_stall:
                sys.exit(1)
        time.sleep(interval)


@click.command("restart-args")
@click.argument("spec_file", type=click.Path(dir_okay=False), default="logdx-restart.json", required=False,
                envvar="LOGDX_RESTART_FILE")
@click.option("--format", "fmt", type=click.Choice(["megatron", "megatron-deepspeed", "hf", "env"]),
              default="megatron", show_default=True)
@click.option("--missing-ok", is_flag=True, help="Print nothing (exit 0) when the spec file does not exist.")
def restart_args(spec_file: str, fmt: str, missing_ok: bool) -> None:
    """The restart spec the controller wrote (SPEC_FILE, default $LOGDX_RESTART_FILE or
    ./logdx-restart.json) as a framework's own arguments, shell-quoted on one line, for
    `eval "EXTRA=($(logdx restart-args --missing-ok))"` (examples/restart_launcher.sh).
    `--format env` prints NAME=value lines. A spec written for another restart than this run's
    (SLURM_RESTART_COUNT or LOGDX_RESTART_COUNT) is stale: nothing is printed (a note on stderr)."""
    from pathlib import Path

    from app.controller.restart_args import SpecError, framework_args, load_spec, shell_words

    import os

    if missing_ok and not Path(spec_file).exists():
        return
    try:
        spec = load_spec(spec_file)
        stale = spec.stale(dict(os.environ))
        if stale:  # a later restart than the one it was written for: start as the launcher would
            click.echo(f"logdx restart-args: {spec_file}: {stale}", err=True)
            return
        words = framework_args(spec, fmt)
    except SpecError as exc:
        _fail(str(exc))
    click.echo("\n".join(words) if fmt == "env" else shell_words(words))
