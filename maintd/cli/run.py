"""``maintd run``: one-shot maintenance of tables (plan, execute on Spark, commit, summary).

With a state store configured it runs like a daemon replica: each table under its lease (tables another
holder is maintaining are skipped and reported), every run recorded (see :mod:`maintd.service.oneshot`).
A URI that is not a table is refused before anything runs (one line, exit 2); a table whose maintenance
fails is reported and the others still run (exit 1).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from maintd.cli._output import fail, print_table

if TYPE_CHECKING:
    from rich.console import Console

STAGES = ("planning", "executing", "committing", "done")


def register(app: typer.Typer) -> None:
    """Add ``maintd run`` to the root app."""
    app.command("run")(run_command)


def run_command(
    uris: list[str] = typer.Argument(None, help="Table URIs; default: the tables of the config's warehouse."),
    policy: Path | None = typer.Option(None, "--policy", help="Policy YAML file (default: config, then packaged)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Plan and print, change nothing."),
    no_reclaim: bool = typer.Option(False, "--no-reclaim", help="Skip the reclamation that follows maintenance."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    config: Path | None = typer.Option(None, "--config", help="Settings YAML (default: $MAINTD_CONFIG, "
                                                               "config/maintd.yaml)."),
) -> None:
    """Run maintenance once on tables, then reclaim them, and print what it did; exits non-zero naming the
    failing tables. With a state store, each table is maintained under its lease and its runs are recorded."""
    from rich.console import Console

    from maintd.cli._output import load_cli_settings
    from maintd.errors import MaintdError
    from maintd.service.discovery import warehouse_tables
    from maintd.service.logging import configure_logging
    from maintd.service.oneshot import OneShot, store_for_run

    console = Console(stderr=json_out, soft_wrap=True)
    try:
        settings = load_cli_settings(config)
        configure_logging(settings.logging, own_stderr=True)
        targets, failed_roots = (list(uris), []) if uris else warehouse_tables(settings)
        if not targets:
            fail("; ".join(r.error or r.root for r in failed_roots)
                 or "no tables: give table URIs or set warehouse.roots / warehouse.tables in the config")
        check_tables(uris or [])
        store = None if dry_run else store_for_run(settings)
        try:
            with _progress(console, targets, quiet=settings.logging.json_lines) as report:
                runner = OneShot(settings, store, policy_path=str(policy) if policy else None,
                                 reclaim=not no_reclaim, progress=report)
                outcomes = runner.run(targets, dry_run=dry_run)
        finally:
            if store is not None:
                store.close()
    except MaintdError as exc:
        from maintd.cli._output import exit_code_for

        fail(str(exc), code=exit_code_for(exc))
    if json_out:
        sys.stdout.write(json.dumps([o.to_dict() for o in outcomes], indent=2, default=str) + "\n")
    else:
        ran = [o.summary for o in outcomes if o.summary is not None]
        if ran:
            print_summaries(console, ran, dry_run=dry_run)
    for o in outcomes:
        if o.skipped:
            console.print(f"{o.uri}: skipped: its lease is held by {o.leased_by}, which maintains it now",
                          highlight=False, markup=False)
    failing = [o.uri for o in outcomes if not o.ok]
    for root in failed_roots:  # the tables found elsewhere were maintained; the root is reported, exit 1
        console.print(f"[red]error:[/red] {root.error}", highlight=False)
    if failing:
        console.print(f"[red]maintenance failed for {len(failing)} table(s):[/red] {', '.join(failing)}")
    if failing or failed_roots:
        raise typer.Exit(1)


def check_tables(uris: Sequence[str]) -> None:
    """Refuse, before anything runs, URIs given on the command line that hold no table.

    Raises:
        TableNotFoundError: naming the first URI that is not a table.
    """
    from maintd.table import Table

    for uri in uris:
        Table.open(uri)


def _progress(console: Console, targets: Sequence[str], *, quiet: bool = False
              ) -> AbstractContextManager[Callable[[str, str], None]]:
    """A rich progress bar per table on a terminal; plain lines otherwise (none with JSON logs, whose
    summary line per run says it all)."""
    if quiet and not console.is_terminal:
        return nullcontext(lambda uri, stage: None)
    if not console.is_terminal:
        def plain(uri: str, stage: str) -> None:
            console.print(f"{uri}: {stage}", highlight=False)

        return nullcontext(plain)
    return _RichProgress(console, targets)


class _RichProgress:
    def __init__(self, console: Console, targets: Sequence[str]) -> None:
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
        self.bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                            TextColumn("{task.fields[stage]}"), TimeElapsedColumn(), console=console, transient=True)
        self.ids = {u: self.bar.add_task(u, total=len(STAGES), stage="waiting") for u in targets}

    def __enter__(self) -> Callable[[str, str], None]:
        self.bar.__enter__()
        return self.report

    def __exit__(self, *exc: Any) -> None:
        self.bar.__exit__(*exc)

    def report(self, uri: str, stage: str) -> None:
        done = STAGES.index(stage) + 1 if stage in STAGES else len(STAGES)
        self.bar.update(self.ids[uri], completed=done, stage=stage)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def print_summaries(console: Console, summaries: Sequence[Any], *, dry_run: bool = False) -> None:
    """One row per table: tasks, files and bytes before/after, bytes read/written, time, conflicts."""
    from rich.table import Table as RichTable
    t = RichTable(title="maintd run (dry run: nothing changed)" if dry_run else "maintd run")
    for col in ("table", "status", "tasks", "files", "bytes", "read", "written", "time", "conflicts"):
        t.add_column(col, justify="left" if col in ("table", "status") else "right")
    for s in summaries:
        colour = "green" if s.ok else "red"
        tasks = f"{s.tasks_planned}" if dry_run or not s.tasks_planned else f"{s.tasks_committed}/{s.tasks_planned}"
        t.add_row(s.uri, f"[{colour}]{s.status}[/{colour}]", tasks, f"{s.before.files} -> {s.after.files}",
                  f"{human_bytes(s.before.bytes)} -> {human_bytes(s.after.bytes)}", human_bytes(s.bytes_read),
                  human_bytes(s.bytes_written), f"{s.seconds:.1f} s", str(s.conflicts))
    print_table(console, t)
    for s in summaries:
        if s.spark_app_id:
            retried = f", {s.spark_retries} retried" if s.spark_retries else ""
            console.print(f"{s.uri}: ran as Spark application {s.spark_app_id} on {s.spark_master} "
                          f"({s.spark_tasks} Spark task(s){retried}; {len(s.commits)} commit(s))", highlight=False)
        elif s.engine == "in-process":
            console.print(f"{s.uri}: ran on this machine, not on Spark ({s.spark_tasks} pack(s); "
                          f"{len(s.commits)} commit(s))", highlight=False)
        if s.reclaim:
            r = s.reclaim
            verb = "would reclaim" if dry_run else "reclaimed"
            console.print(f"{s.uri}: {verb} {r['versions_expired']} expired version(s) (oldest retained "
                          f"{r['oldest_retained_version']}): {r['log_files_deleted']} log, {r['data_files_deleted']} "
                          f"data ({human_bytes(r['data_bytes_deleted'])}) and {r['orphan_files_deleted']} orphan "
                          f"file(s)", highlight=False)
        if s.error:
            console.print(f"[red]{s.uri}:[/red] {s.error}", highlight=False)
        if dry_run:
            for p in s.planned:
                console.print(f"  {p['task_id']}: {p['kind']} bucket {p['bucket']} {p['partition'] or ''} "
                              f"{p['files']} files {human_bytes(p['bytes'])}: {p['reason']}", highlight=False)
