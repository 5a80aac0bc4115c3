"""``maintd gc`` (reclamation by retention, and orphans) and ``maintd purge`` (drop all history now).

Both are destructive, so both say what they delete: ``--dry-run`` lists it and changes nothing, and
``purge`` asks for confirmation on a terminal and refuses to run unattended without ``--yes``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from maintd.cli._output import confirm, fail, parse_kv, print_json, print_table, user_errors
from maintd.errors import InvalidInputError, MaintdError

if TYPE_CHECKING:
    from rich.console import Console

SHOWN_PATHS = 20
"""Paths listed per kind in the text output of a dry run (``--json`` lists them all)."""


def register(app: typer.Typer) -> None:
    """Add ``maintd gc`` and ``maintd purge`` to the root app."""
    app.command("gc")(gc_command)
    app.command("purge")(purge_command)


_GRACE_HELP = "Keep unreferenced files younger than this. Hours; default: reclaim.orphan_grace_hours (72)."
_FORCE_HELP = "Allow --orphan-grace-hours below 1 (only when no writer runs)."
_CONFIG_HELP = "Settings YAML (default: $MAINTD_CONFIG, config/maintd.yaml)."


def _grace(config: Path | None, hours: float | None, force: bool) -> tuple[timedelta, bool, Any]:
    from maintd.cli._output import load_cli_settings

    settings = load_cli_settings(config)
    chosen = settings.reclaim.orphan_grace_hours if hours is None else hours
    return timedelta(hours=chosen), force or (hours is None and settings.reclaim.force_short_grace), settings


def gc_command(
    uris: list[str] = typer.Argument(None, help="Table URIs; default: the tables of the config's warehouse."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what would be deleted; delete nothing."),
    json_out: bool = typer.Option(False, "--json", help="Print one report per table as JSON."),
    orphan_grace_hours: float | None = typer.Option(None, "--orphan-grace-hours", help=_GRACE_HELP),
    force_short_grace: bool = typer.Option(False, "--force-short-grace", help=_FORCE_HELP),
    config: Path | None = typer.Option(None, "--config", help=_CONFIG_HELP),
) -> None:
    """Reclaim tables now: expire versions older than acid.data.retain.hours and delete what nothing needs."""
    from rich.console import Console
    from rich.markup import escape

    from maintd.reclaim import plan_reclamation, reclaim_table
    from maintd.reclaim.engine import check_grace, report_of
    from maintd.service.discovery import warehouse_tables
    from maintd.table import Table

    with user_errors():
        grace, force, settings = _grace(config, orphan_grace_hours, force_short_grace)
        check_grace(grace, force)
        targets, failed_roots = (list(uris), []) if uris else warehouse_tables(settings)
        for uri in uris or []:  # a URI given that is no table is bad input: refused before anything is deleted
            Table.open(uri)
    if not targets:
        fail("; ".join(r.error or r.root for r in failed_roots)
             or "no tables: give table URIs or set warehouse.roots / warehouse.tables in the config")
    reports: list[Any] = []
    failed: list[str] = []
    for root in failed_roots:  # reported as failing; the tables found elsewhere are still reclaimed
        Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {escape(root.error or root.root)}",
                                                   highlight=False)
    for uri in targets:
        try:
            table = Table.open(uri)
            if dry_run:
                plan = plan_reclamation(table, orphan_grace=grace)
                reports.append(report_of(plan, dry_run=True))
                if not json_out:
                    Console(soft_wrap=True).print(f"[bold]{escape(plan.table)}[/bold] would delete:")
                    _print_paths(Console(soft_wrap=True), plan)
            else:
                reports.append(reclaim_table(table, orphan_grace=grace, force_short_grace=force))
        except MaintdError as exc:
            failed.append(uri)
            Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
    if json_out:
        print_json([r.model_dump(mode="json") for r in reports])
    else:
        print_reports(Console(soft_wrap=True), reports, dry_run=dry_run)
    if failed or failed_roots:
        roots = f"; {len(failed_roots)} warehouse root(s) could not be searched" if failed_roots else ""
        fail(f"reclamation failed for {len(failed)} table(s): {', '.join(failed)}{roots}", code=1)


def purge_command(
    uri: str = typer.Argument(..., help="The table to purge."),
    partition: list[str] = typer.Option(
        [], "--partition", help="Limit the file deletion to a partition, COLUMN=VALUE; repeat for each column."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what would be deleted; change nothing."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation (needed when not on a terminal)."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    orphan_grace_hours: float | None = typer.Option(None, "--orphan-grace-hours", help=_GRACE_HELP),
    force_short_grace: bool = typer.Option(False, "--force-short-grace", help=_FORCE_HELP),
    config: Path | None = typer.Option(None, "--config", help=_CONFIG_HELP),
    force_unpin: bool = typer.Option(False, "--force-unpin", help="Drop pinned versions too, removing their pins "
                                                                  "(recorded in the PURGE commit)."),
) -> None:
    """Drop all history before the current version now (time travel to older versions ends), and delete every
    file the current version does not reference; recorded as a PURGE commit in the table history."""
    from rich.console import Console

    from maintd.reclaim import plan_purge, purge_table
    from maintd.reclaim.engine import check_grace
    from maintd.table import Table

    spec = _partition_spec(partition)
    out = Console(soft_wrap=True, stderr=json_out)
    with user_errors():
        grace, force, _ = _grace(config, orphan_grace_hours, force_short_grace)
        check_grace(grace, force)
        table = Table.open(uri)
        preview = plan_purge(table, partitions=[spec] if spec else [], orphan_grace=grace)
        if preview.pinned_versions and not force_unpin:
            raise InvalidInputError(
                f"table {table.uri}: PURGE would drop pinned version(s) "
                f"{', '.join(map(str, preview.pinned_versions))}; wait for the pins to expire, unpin them "
                "(`maintd table pins` lists them), or pass --force-unpin to remove them")
    _print_purge_preview(out, preview)
    if dry_run:
        if json_out:
            print_json(preview.model_dump(mode="json") | {"dry_run": True})
        return
    confirm(f"Purge {table.uri}? This cannot be undone", yes=yes, out=out, cancelled="purge cancelled; nothing changed",
            refusal=f"refusing to purge {table.uri} without confirmation: not on a terminal; pass --yes to confirm "
                    "(or --dry-run to see what it deletes)")
    with user_errors():
        report = purge_table(table, partitions=[spec] if spec else [], orphan_grace=grace, force_short_grace=force,
                             force_unpin=force_unpin)
    if json_out:
        print_json(report.model_dump(mode="json"))
    else:
        print_reports(out, [report], dry_run=False)


def _partition_spec(items: Sequence[str]) -> dict[str, str]:
    spec = parse_kv(list(items), "--partition")
    if len(spec) != len(items):
        fail("--partition names a column twice; give one value per partition column and purge each partition "
             "with its own command")
    return spec


def _print_purge_preview(out: Console, plan: Any) -> None:
    from rich.markup import escape
    scope = ", ".join(f"{k}={v}" for spec in plan.partitions for k, v in spec.items()) or "every partition"
    out.print(
        f"[bold]{escape(plan.table)}[/bold]: PURGE at version {plan.latest_version} ends time travel to "
        f"{plan.versions_expired} older version(s) of the whole table and deletes, in {escape(scope)}:",
        highlight=False,
    )
    _print_paths(out, plan)


def _print_paths(out: Console, plan: Any) -> None:
    from rich.markup import escape

    from maintd.units import fmt_bytes

    for label, files in (("log files", plan.log_files), ("data files", plan.data_files),
                         ("orphan files", plan.orphan_files)):
        out.print(f"  {len(files)} {label} ({fmt_bytes(sum(f.bytes for f in files))})", highlight=False)
        for f in files[:SHOWN_PATHS]:
            out.print(f"    {escape(f.path)}", highlight=False)
        if len(files) > SHOWN_PATHS:
            out.print(f"    ... and {len(files) - SHOWN_PATHS} more (--json lists them all)", highlight=False)
    if plan.orphans_within_grace:
        out.print(f"  {plan.orphans_within_grace} unreferenced file(s) younger than the "
                  f"{plan.orphan_grace_hours:g} h grace are kept (a writer may be about to commit them)",
                  highlight=False)


def print_reports(console: Console, reports: Sequence[Any], *, dry_run: bool) -> None:
    """One row per table: versions expired, oldest retained version, and log, data and orphan files deleted."""
    from rich.markup import escape
    from rich.table import Table as RichTable

    from maintd.units import fmt_bytes

    title = "maintd gc (dry run: would delete)" if dry_run else "maintd reclamation"
    t = RichTable(title=title)
    for col in ("table", "versions expired", "oldest retained", "log files", "data files", "orphans", "kept young",
                "time"):
        t.add_column(col, justify="left" if col == "table" else "right")
    for r in reports:
        t.add_row(escape(r.table), str(r.versions_expired), str(r.oldest_retained_version), str(r.log_files_deleted),
                  f"{r.data_files_deleted} ({fmt_bytes(r.data_bytes_deleted)})",
                  f"{r.orphan_files_deleted} ({fmt_bytes(r.orphan_bytes_deleted)})", str(r.orphans_within_grace),
                  f"{r.seconds:.2f} s")
    print_table(console, t)
    for r in reports:
        if r.pinned_versions:
            kept = ", ".join(map(str, r.pinned_versions))
            console.print(f"{escape(r.table)}: pinned version(s) {kept} kept, holding back "
                          f"{fmt_bytes(r.pinned_bytes)} (`maintd table pins` lists the pins)", highlight=False)
        if r.pins_removed:
            console.print(f"{escape(r.table)}: removed {len(r.pins_removed)} pin(s): {', '.join(r.pins_removed)}",
                          highlight=False)
        if not r.complete:
            console.print(f"[yellow]{escape(r.table)}:[/yellow] some files could not be deleted; the next run "
                          "retries them (see the log)", highlight=False)
