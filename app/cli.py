"""The `logdx` command line. Exit codes: 0 success, 2 usage or bad input, 3 internal error."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import click

from app.core import ablation
from app.core.ingest import InputError
from app.core.rules import RuleError, check_examples, load_rules

EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3
PROGRESS_MIN_BYTES = 64 * 1024 * 1024
RULES_HELP = ("Rules directory (default: $LOGDX_RULES_DIR, else the shipped rules); a site's own rule files "
              "beside them: $LOGDX_RULES_OVERLAY.")


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    click.echo(f"logdx: {message}", err=True)
    sys.exit(code)


def _pipeline(rules_dir: str | None):
    from app.core.pipeline import Pipeline

    try:
        return Pipeline(rules_dir=rules_dir)
    except RuleError as exc:
        _fail(f"bad rules: {exc}")


def _agent(llm_backend: str | None, pipeline):
    """The LLM failure agent from settings (LOGDX_LLM_*), or None for rules only."""
    if llm_backend == "none" or (llm_backend is None and os.environ.get("LOGDX_LLM_BACKEND", "none") == "none"):
        return None
    from pydantic import ValidationError

    from app.llm.factory import build_agent
    from app.settings import Settings

    try:
        settings = Settings(**({"llm_backend": llm_backend} if llm_backend else {}))
        return build_agent(settings, policies=pipeline.ruleset.policies, ruleset=pipeline.ruleset)
    except ValidationError as exc:
        err = exc.errors()[0]
        _fail(f"bad LLM settings: {'.'.join(map(str, err['loc']))}: {err['msg']}")
    except ValueError as exc:
        _fail(f"bad LLM settings: {exc}")


def _bar_total(source: str) -> int | None:
    """The bytes a progress bar counts to, or None for no bar: a plain file of
    PROGRESS_MIN_BYTES or more, a gz/zst file of an eighth of that (it expands ~10x; its bar
    counts compressed bytes read)."""
    path = Path(source)
    if source == "-" or not path.is_file():
        return None
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(4)
    compressed = head.startswith((b"\x1f\x8b", b"\x28\xb5\x2f\xfd"))
    return size if size >= (PROGRESS_MIN_BYTES // 8 if compressed else PROGRESS_MIN_BYTES) else None


@contextmanager
def _progress(source: str):
    """A byte progress bar on stderr for big inputs, only when stderr is a terminal."""
    size = _bar_total(source) if sys.stderr.isatty() else None
    if size is None:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TransferSpeedColumn

    with Progress("[progress.description]{task.description}", BarColumn(), TransferSpeedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("reading", total=size)
        yield lambda n: bar.advance(task, n)


def _run(fn: Callable[[], None]) -> None:
    try:
        fn()
    except InputError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as exc:  # last resort: one line, no traceback, distinct exit code
        _fail(f"internal error: {type(exc).__name__}: {exc}", EXIT_INTERNAL)


class _LazyGroup(click.Group):
    """Service commands are imported only when used: diagnosing a log never pays for the
    web/database imports."""

    lazy = {"serve": "app.service_cli:serve", "migrate": "app.service_cli:migrate", "worker": "app.service_cli:worker",
            "token": "app.service_cli:token", "llm": "app.llm.cli:llm", "relabel": "app.relabel.cli:relabel",
            "demo-data": "app.service_cli:demo_data",
            "probe": "app.controller.cli:probe", "recover": "app.controller.cli:recover",
            "watch": "app.controller.cli:watch", "restart-args": "app.controller.cli:restart_args"}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy and name not in self.commands:
            module, attr = self.lazy[name].split(":")
            import importlib

            self.add_command(getattr(importlib.import_module(module), attr), name)
        return super().get_command(ctx, name)


@click.group(cls=_LazyGroup)
@click.version_option(package_name="logdx")
def cli() -> None:
    """logdx: find why an LLM training job failed, from its log."""


@cli.command()
@click.argument("log")
@click.option("--json", "as_json", is_flag=True, help="Print the diagnosis JSON contract.")
@click.option("--rules", "rules_dir", type=click.Path(file_okay=False), envvar="LOGDX_RULES_DIR",
              help=RULES_HELP)
@click.option("--llm", "llm_backend", type=click.Choice(["none", "openai", "transformers"]), default=None,
              help="Ask an LLM when the rules are unsure (default: $LOGDX_LLM_BACKEND, else none).")
def diagnose(log: str, as_json: bool, rules_dir: str | None, llm_backend: str | None) -> None:
    """Diagnose LOG (a path, or - for stdin; plain, gz or zst)."""
    pipeline = _pipeline(rules_dir)
    agent = _agent(llm_backend, pipeline)

    def go() -> None:
        with _progress(log) as tick:
            result = pipeline.diagnose(log, on_progress=tick)
        diagnosis = agent.refine(result) if agent is not None else _without_llm(result, pipeline)
        if as_json:
            click.echo(json.dumps(diagnosis.to_json_dict(), indent=2, ensure_ascii=False))
        else:
            _print_summary(diagnosis)

    _run(go)


def _without_llm(result, pipeline):
    """No model configured: for a log no rule explained, with error-looking lines, the nearest
    rule examples' type is reported as a suggestion (a note), not as the answer, when the
    embedder is installed. Measured on the labelled splits (bench/README.md), the vote alone
    named a wrong type more often than a right one and turned negative controls into false
    alarms; with a model, the same examples are the model's candidates (app/llm/agent.py)."""
    d = result.diagnosis
    if d.root_cause.error_type.value != "Unknown" or not ablation.enabled("retrieval"):
        return d
    if not result.compressed.flagged_lines and all(e.error_type.value != "Unknown" for e in result.events):
        # retrieval reads only unexplained lines (catch-all events, flagged lines): with none,
        # the answer is the rules' one, and loading the LLM layer (numpy...) would be pure cost
        return d
    from app.llm.factory import build_fallback_agent

    agent = build_fallback_agent(pipeline.ruleset)
    if agent is None:
        return d
    voted = agent.refine(result)
    if voted.decided_by.value != "retrieval":
        return d
    note = (f"suggestion, not applied (a resemblance is no evidence; configure a model to weigh it): "
            f"{voted.root_cause.error_type.value}? {voted.root_cause.explanation}")
    return replace(d, notes=[*d.notes, note])


Piece = tuple[str, str]  # (text, rich style; "" for none)
# control characters but tab, as `\xNN`: a log line's escape sequences (colour, window title, an
# OSC 52 clipboard write) are shown, not run, by the terminal reading the summary (`rich` would
# pass ESC through)
_VISIBLE = str.maketrans({c: f"\\x{c:02x}" for c in (*range(0, 9), *range(10, 32), *range(127, 160))})


def _summary(d) -> tuple[list[list[Piece]], list[tuple[str, ...]], list[list[Piece]]]:
    """The human summary of a diagnosis: the lines before the co-occurring table, the table's
    rows (header first; none without co-occurring errors) and the lines after it."""
    rc, a = d.root_cause, d.action
    head: list[list[Piece]] = [
        [(rc.error_type.value, "bold red"), (f" ({rc.category.value}), confidence {rc.confidence:.2f}", "")],
        [(rc.explanation, "")]]
    for ev in rc.evidence[:3]:
        where = " ".join(x for x in (f"rank {ev.rank}" if ev.rank is not None else "",
                                     f"host {ev.host}" if ev.host else "") if x)
        head.append([(f"  line {ev.line}{' (' + where + ')' if where else ''}: {ev.text[:300]}", "")])
    head.append([("Action:", "bold"), (f" {a.kind.value}"
                 + (f"  suspect hosts: {', '.join(a.suspect_hosts)}" if a.suspect_hosts else "")
                 + (f"  suspect ranks: {', '.join(map(str, a.suspect_ranks))}" if a.suspect_ranks else ""), "")])
    head.append([(f"  {a.reason}", "")])
    table = [("co-occurring", "role", "count", "first line")] if d.co_occurring else []
    table += [(c.error_type.value, c.role, str(c.count), str(c.first_line)) for c in d.co_occurring]
    tail: list[list[Piece]] = []
    if d.last_progress:
        p = d.last_progress
        tail.append([(f"Last progress: line {p.line}, step {p.step}, time {p.time}", "")])
    s = d.compression
    tail.append([(f"Compression: {s.lines_in} lines -> {s.lines_kept} kept ({s.templates} templates), "
                  f"ratio {s.ratio}x", "")])
    tail += [[("note:", "yellow"), (f" {note}", "")] for note in d.notes]
    table = [tuple(cell.translate(_VISIBLE) for cell in row) for row in table]
    return _visible(head), table, _visible(tail)


def _visible(lines: list[list[Piece]]) -> list[list[Piece]]:
    return [[(text.translate(_VISIBLE), style) for text, style in line] for line in lines]


def _plain(line: list[Piece]) -> str:
    return "".join(text for text, _ in line)


def _print_summary(d) -> None:
    """The summary in colour through `rich` on a terminal; elsewhere (a file, a pipe: a Slurm
    epilog's output) as plain text, lines not wrapped, and no `rich` to import (~25 ms of a
    one-line log's 0.2 s)."""
    head, table, tail = _summary(d)
    if not sys.stdout.isatty():
        widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))] if table else []
        rows = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table]
        click.echo("\n".join([*map(_plain, head), *rows, *map(_plain, tail)]))
        return
    from rich.console import Console
    from rich.text import Text

    con = Console()
    for line in head:
        con.print(Text.assemble(*line), highlight=False)
    if table:
        from rich.table import Table  # only a log with co-occurring errors pays for it

        grid = Table(*table[0])
        for row in table[1:]:
            grid.add_row(*row)
        con.print(grid)
    for line in tail:
        con.print(Text.assemble(*line), highlight=False)


@cli.command()
@click.argument("log")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the compressed log here.")
@click.option("--stats", is_flag=True, help="Print compression statistics as JSON on stderr.")
@click.option("--rules", "rules_dir", type=click.Path(file_okay=False), envvar="LOGDX_RULES_DIR",
              help=RULES_HELP)
def compress(log: str, output: str | None, stats: bool, rules_dir: str | None) -> None:
    """Compress LOG: drop metric lines, fold repeats, keep errors with context."""
    if output:  # (before reading a large log for nothing)
        where = Path(output).resolve().parent
        if not where.is_dir() or not os.access(where, os.W_OK):
            _fail(f"cannot write {output}: {'no such directory' if not where.is_dir() else 'permission denied'}")
    pipeline = _pipeline(rules_dir)

    def go() -> None:
        with _progress(log) as tick:
            result = pipeline.compress(log, on_progress=tick)
        if output:
            try:
                Path(output).write_text(result.text, encoding="utf-8")
            except OSError as exc:
                _fail(f"cannot write {output}: {exc.strerror or exc}")
        else:
            click.echo(result.text, nl=False)
        if stats:
            click.echo(json.dumps(result.stats.to_json_dict(), indent=2), err=True)

    _run(go)


@cli.group()
def rules() -> None:
    """Inspect and test the rule library."""


@rules.command("test")
@click.option("--rules", "rules_dir", type=click.Path(file_okay=False), envvar="LOGDX_RULES_DIR",
              help=RULES_HELP)
@click.option("--overlay", type=click.Path(file_okay=False), envvar="LOGDX_RULES_OVERLAY",
              help="A site's own rule files, loaded beside the rules directory (default: $LOGDX_RULES_OVERLAY).")
def rules_test(rules_dir: str | None, overlay: str | None) -> None:
    """Run every rule's match/no_match examples."""
    try:
        rs = load_rules(rules_dir, overlay=overlay or None)
    except RuleError as exc:
        _fail(f"bad rules: {exc}")
    failures = check_examples(rs)
    n = sum(len(r.spec.examples.match) + len(r.spec.examples.no_match) for r in [*rs.diagnosis, *rs.filters])
    n += sum(len(e.examples.match) + len(e.examples.no_match) for e in [*rs.exceptions, *rs.subsystems])
    for f in failures:
        want = "should match" if f.expected_match else "should not match"
        click.echo(f"FAIL {f.source}: {f.rule_id} {want}: {f.example}")
    click.echo(f"{len(rs.diagnosis)} diagnosis rules, {len(rs.filters)} filter rules, {len(rs.policies)} policies, "
               f"{len(rs.exceptions)} exception-table entries, {len(rs.subsystems)} subsystem-vocabulary entries; "
               f"{n - len(failures)}/{n} examples pass (rules version {rs.version})")
    sys.exit(1 if failures else 0)


@rules.command("export")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--force", is_flag=True, help="Write into a directory that is not empty (files of the same name are replaced).")
def rules_export(directory: str, force: bool) -> None:
    """Write the rules shipped with logdx to DIRECTORY: a starting point for a site's own library
    (LOGDX_RULES_DIR=DIRECTORY); to only add rules, use an overlay (LOGDX_RULES_OVERLAY)."""
    import shutil

    from app import resources

    target = Path(directory)
    try:
        source = resources.rules_dir()
    except resources.DataNotFound as exc:
        _fail(str(exc), EXIT_INTERNAL)
    if target.exists() and not target.is_dir():
        _fail(f"cannot export the rules to {target}: not a directory")
    if target.is_dir() and any(target.iterdir()) and not force:
        _fail(f"{target} is not empty: nothing written (--force writes into it, replacing files of the same name)")
    files = sorted(p for p in source.rglob("*.yaml") if p.is_file())
    try:
        for path in files:
            out = target / path.relative_to(source)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, out)
    except OSError as exc:
        _fail(f"cannot write {exc.filename or target}: {exc.strerror or exc}")
    click.echo(f"exported {len(files)} rule files to {target}; use them with LOGDX_RULES_DIR={target.resolve()}",
               err=True)


@rules.command("propose")
@click.argument("log")
@click.option("--rules", "rules_dir", type=click.Path(file_okay=False), envvar="LOGDX_RULES_DIR",
              help=RULES_HELP)
@click.option("--apply", "apply_", is_flag=True,
              help="Append the validated proposals to the rules directory (what an admin's approval does).")
def rules_propose(log: str, rules_dir: str | None, apply_: bool) -> None:
    """Propose filter rules for LOG's bulk metric lines that no filter rule knows (the log agent)."""
    pipeline = _pipeline(rules_dir)

    def go() -> None:
        import yaml

        from app.llm.rulewriter import propose_filter_rules

        compressed = pipeline.compress(log)
        proposals = [p for p in propose_filter_rules(compressed, ruleset=pipeline.ruleset) if p.rule is not None]
        if not proposals:
            click.echo("no proposal: every bulk line is already filtered or none looks like a metric", err=True)
            return
        for p in proposals:
            click.echo(f"# {p.rule.validation.get('count')} lines; validation ok; family {p.rule.family}")
            click.echo(yaml.safe_dump([p.rule.rule], sort_keys=False, allow_unicode=True, width=200))
        if apply_:
            from app.core.rules import DEFAULT_RULES_DIR
            from app.rules_review.rulefiles import append_rule

            target = Path(rules_dir) if rules_dir else DEFAULT_RULES_DIR
            for p in proposals:
                append_rule(rules_dir=target, kind=p.rule.kind, family=p.rule.family, rule=p.rule.rule)
            click.echo(f"appended {len(proposals)} rule(s) to {target}", err=True)

    _run(go)


@rules.command("explain")
@click.argument("line")
@click.option("--rules", "rules_dir", type=click.Path(file_okay=False), envvar="LOGDX_RULES_DIR",
              help=RULES_HELP)
def rules_explain(line: str, rules_dir: str | None) -> None:
    """Show which rules match LINE, with their captured groups."""
    try:
        rs = load_rules(rules_dir)
    except RuleError as exc:
        _fail(f"bad rules: {exc}")
    found = False
    for rule in [*rs.diagnosis, *rs.filters]:
        m = rule.regex.search(line, timeout=1.0)
        if not m:
            continue
        found = True
        groups = {k: v for k, v in m.groupdict().items() if v is not None}
        spec = rule.spec
        kind = f"diagnosis {spec.error_type.value} role={spec.role.value} priority={rule.priority}" \
            if hasattr(spec, "error_type") else f"filter {spec.filter.value}"
        click.echo(f"{rule.id} [{rule.source}] {kind} groups={json.dumps(groups)}")
    if not found:
        click.echo("no rule matches: the line is kept (folded into its template with lines of the same shape)")
        from app.core.subsystems import vocabulary_of

        spec = vocabulary_of(rs).type_line(line)
        if spec is not None:
            click.echo(f"=> the subsystem vocabulary reads it as {spec.error_type.value} ({spec.id}) if the log's "
                       "failure is otherwise untyped and the line is error-looking: the family only, the action "
                       "stays investigate")
        return
    click.echo(_verdict(rs, line))


def _verdict(rs, line: str) -> str:  # noqa: ANN001
    """Which matching rule decides what happens to LINE, and why (the compressor's own choice)."""
    from app.core.matcher import MultiMatcher

    hits = MultiMatcher(rs.diagnosis).hits(line)
    filter_idx = MultiMatcher(rs.filters).first(line)
    if hits:
        best = max(hits, key=lambda h: h.rule.priority)  # as the compressor records an event
        top = [h for h in hits if h.rule.priority == best.rule.priority]
        why = (f"the highest priority ({best.rule.priority}) of the {len(hits)} matching diagnosis rules"
               if len(hits) > 1 else "the only matching diagnosis rule")
        if len(top) > 1:
            why += f", tied with {', '.join(h.rule.id for h in top[1:])}: the first in load order wins"
        out = (f"=> wins: {best.rule.id} ({best.rule.spec.error_type.value}): {why}. The line is one "
               f"{best.rule.spec.error_type.value} event with role {best.rule.spec.role.value}; ranking then "
               "weighs it against the log's other events (cause > wrapper > symptom, priority, earlier line).")
        if filter_idx is not None:
            out += (f" Not dropped although filter {rs.filters[filter_idx].id} matches: a line a diagnosis "
                    "rule matches is never dropped.")
        return out
    rule = rs.filters[filter_idx]
    out = (f"=> wins: {rule.id} (filter {rule.spec.filter.value}): the first matching filter rule in load "
           "order, and no diagnosis rule matches, so the line is dropped")
    if rule.spec.extract:
        out += "; its named values go to the metric series"
    if rule.spec.progress:
        out += "; it marks training progress"
    return out + "."


@rules.command("diff")
@click.argument("old_dir", type=click.Path(file_okay=False, exists=True))
@click.argument("new_dir", type=click.Path(file_okay=False, exists=True))
@click.option("--logs", required=True, metavar="DIR|GLOB", help="Logs to diagnose with both rule sets.")
@click.option("--workers", type=click.IntRange(1, 512), default=None, help="Processes (default: one per core).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the diff report as JSON here.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="Write one CSV row per log here.")
@click.option("--quiet", is_flag=True, help="No progress output.")
def rules_diff(old_dir: str, new_dir: str, logs: str, workers: int | None, json_path: str | None,
               csv_path: str | None, quiet: bool) -> None:
    """What changing the rules from OLD_DIR to NEW_DIR does to the logs in --logs."""
    from app.relabel.cli import rules_diff_command

    rules_diff_command(old_dir, new_dir, logs, workers, json_path, csv_path, quiet)


# commands that read one log and print: when one ends, the interpreter's teardown (freeing every
# template, rule and compiled pattern one by one, 10-20 ms of a run) is skipped, as mypy does
_HARD_EXIT_COMMANDS = {"diagnose", "compress"}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in _HARD_EXIT_COMMANDS:
        cli(prog_name="logdx")
        return
    try:
        cli(prog_name="logdx")  # (standalone: always ends in SystemExit)
        code = 0
    except SystemExit as exc:
        if exc.code is not None and not isinstance(exc.code, int):
            raise
        code = exc.code or 0
    _hard_exit(code)


def _hard_exit(code: int) -> None:
    """Exit without the interpreter's teardown: atexit handlers run and the standard streams are
    flushed, nothing else is left to do (files are written in `with` blocks). Only with no other
    thread alive (one might still be writing)."""
    import atexit
    import threading

    if threading.active_count() > 1:
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, OSError, ValueError):  # (a reader that went away: as _run does)
            pass
    os._exit(code)


if __name__ == "__main__":
    main()
