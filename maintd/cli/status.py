"""``maintd status`` and ``maintd history``: what the daemon knows, read from its state store.

Both only read the store (tables, runs, decisions, leases): they start no Spark and touch no table,
so they are safe to run next to a live daemon, e.g. ``kubectl exec deploy/maintd -- maintd status``.
(``maintd table history URI`` is something else: a table's own commit log.)
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from maintd.cli._output import fail, print_json, print_table, user_errors
from maintd.errors import MaintdError
from maintd.service.run_kinds import RunKind, RunStatus  # history's --kind and --status: every command loads them

if TYPE_CHECKING:
    from rich.console import Console

    from maintd.service.records import RunRecord, TableRecord, TuningRecord

if TYPE_CHECKING:  # SQLAlchemy is imported only when a command opens the store
    from maintd.service.store import StateStore

CONFIG_HELP = "Settings YAML (default: $MAINTD_CONFIG, then config/maintd.yaml); its store.url is read."


def register(app: typer.Typer) -> None:
    """Add ``maintd status`` and ``maintd history`` to the root app."""
    app.command("status")(status_command)
    app.command("history")(history_command)


def open_store(config: Path | None) -> StateStore:
    """The state store named by the settings; an SQLite file that does not exist yet is an error, not created."""
    from sqlalchemy.engine import make_url

    from maintd.service.store import StateStore
    from maintd.settings import load_settings

    settings = load_settings(config)
    url = settings.store.url
    parsed = make_url(url)
    database = parsed.database if parsed.get_backend_name() == "sqlite" else None
    if database and database != ":memory:" and not Path(database).expanduser().is_file():
        fail(
            f"no state store at {database}: the daemon creates it when it starts; start `maintd daemon`, "
            "or point --config / MAINTD_STORE__URL at the daemon's store"
        )
    store = StateStore(
        url, db_schema=settings.store.db_schema, connect_timeout=settings.store.connect_timeout_seconds, create=False
    )
    try:
        store.check_schema()
    except MaintdError:
        store.close()
        raise
    return store


# -- status -------------------------------------------------------------------------------------------------


def status_command(
    config: Path | None = typer.Option(None, "--config", help=CONFIG_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print the status as JSON."),
) -> None:
    """Every registered table: health, layout, backlog, last runs and who holds its lease."""
    with user_errors():
        store = open_store(config)
        try:
            rows = collect_status(store)
            roots = collect_roots(store)
        finally:
            store.close()
    if json_out:
        print_json({"summary": summarise(rows, roots), "tables": rows, "roots": roots})
        return
    from rich.console import Console  # only to print for people: --json needs no Rich

    console = Console()
    print_roots(console, roots)
    print_status(console, rows)


def collect_roots(store: StateStore) -> list[dict[str, Any]]:
    """The last search of every warehouse root, one JSON-able row each."""
    return [
        {
            "uri": root.uri,
            "health": "healthy" if root.healthy else "failing",
            "tables": root.tables,
            "checked_at": root.checked_at,
            "checked_by": root.holder,
            "consecutive_failures": root.failures,
            "last_success": root.succeeded_at,
            "error": root.error,
            "error_type": root.error_type,
        }
        for root in store.list_roots()
    ]


def print_roots(console: Console, roots: list[dict[str, Any]]) -> None:
    """One line per warehouse root; a failing one in red with its error (what to set)."""
    for root in roots:
        when = _when(root["checked_at"])
        if root["health"] == "healthy":
            console.print(f"root {root['uri']}: {root['tables']} table(s) (searched {when})", highlight=False)
        else:
            console.print(
                f"[red]root {root['uri']}: failing ({root['consecutive_failures']} search(es) in a row, last "
                f"{when}):[/red] {root['error']}",
                highlight=False,
            )


def health_of(table: TableRecord, last_runs: list[RunRecord | None]) -> str:
    """``disabled``; ``failing`` (failures in a row, or the last run of some kind failed); ``new`` (never ran
    nor checked); else ``healthy``."""
    if not table.enabled:
        return "disabled"
    if table.consecutive_failures or any(run is not None and run.status == "failed" for run in last_runs):
        return "failing"
    never = all(run is None for run in last_runs) and table.checked_at is None and table.last_run_at is None
    return "new" if never else "healthy"  # checks that found nothing record no run, only the table's row


def collect_status(store: StateStore) -> list[dict[str, Any]]:
    """One JSON-able row per registered table."""
    tables = store.list_tables()
    last_maintenance = store.last_runs(RunKind.MAINTENANCE)
    last_reclaim = store.last_runs(RunKind.RECLAIM)
    holders = store.lease_holders()
    tuning = store.tuning_records()
    rows = []
    for table in tables:
        layout = table.layout or _last_layout(store, table.uri, last_maintenance.get(table.uri))
        rows.append(
            {
                "uri": table.uri,
                "name": table.name,
                "source": table.source,
                "health": health_of(table, [last_maintenance.get(table.uri), last_reclaim.get(table.uri)]),
                "consecutive_failures": table.consecutive_failures,
                "failures": {kind.value: table.failures(kind) for kind in RunKind},
                "retry_after": table.retry_after,
                "last_error": table.last_error,
                "files": layout.get("files"),
                "bytes": layout.get("bytes"),
                "levels": layout.get("levels"),
                "backlog_files": layout.get("backlog_files"),
                "backlog_bytes": layout.get("backlog_bytes"),
                "last_maintenance": _run_brief(last_maintenance.get(table.uri)),
                "last_reclaim": _run_brief(last_reclaim.get(table.uri)),
                "leased_by": holders.get(table.uri),
                "checked_at": table.checked_at,
                "checked_by": table.checked_by,
                "checks": table.checks,
                "checks_planned": table.checks_planned,
                "targets": _targets_row(tuning.get(table.uri)),
            }
        )
    return rows


def _targets_row(record: TuningRecord | None) -> dict[str, Any] | None:
    """The targets, measured figures, gaps and last re-tune of a table (None: it declares no target)."""
    if record is None:
        return None
    return {
        "targets": record.targets,
        "measured": record.measured,
        "measured_at": record.measured_at,
        "gaps": record.gaps,
        "missed": record.missed,
        "last_retune": {
            "at": record.tuned_at,
            "reason": record.reason,
            "overrides": record.overrides,
            "interval_seconds": record.interval_seconds,
            "predicted": record.predicted,
            "measured": record.tuned_measured,
            "error": record.error,
            "error_at": record.error_at,
        },
    }


def _last_layout(store: StateStore, uri: str, last: RunRecord | None) -> dict[str, Any]:
    """The layout recorded by the newest maintenance run that recorded one (the last may still be running):
    for tables whose row holds no layout yet (runs recorded before the store's upgrade to revision 0002)."""
    if last is not None and last.metrics and "files" in last.metrics:
        return last.metrics
    for run in store.history(uri, kind=RunKind.MAINTENANCE, limit=10):
        if run.metrics and "files" in run.metrics:
            return run.metrics
    return {}


def _run_brief(run: RunRecord | None) -> dict[str, Any] | None:
    if run is None:
        return None
    return {
        "id": run.id,
        "status": run.status,
        "started_at": run.started_at,
        "ended_at": run.ended_at,
        "seconds": run.duration_seconds,
        "error": run.error,
    }


def summarise(rows: list[dict[str, Any]], roots: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Counts by health, the total backlog and the failing warehouse roots."""
    by_health: dict[str, int] = {}
    for row in rows:
        by_health[row["health"]] = by_health.get(row["health"], 0) + 1
    return {
        "tables": len(rows),
        "by_health": by_health,
        "backlog_files": sum(row["backlog_files"] or 0 for row in rows),
        "backlog_bytes": sum(row["backlog_bytes"] or 0 for row in rows),
        "leased": sum(1 for row in rows if row["leased_by"]),
        "roots": len(roots or []),
        "roots_failing": sum(1 for root in roots or [] if root["health"] != "healthy"),
    }


_HEALTH_STYLE = {"healthy": "green", "new": "cyan", "failing": "red", "disabled": "dim"}


def print_status(console: Console, rows: list[dict[str, Any]]) -> None:
    from rich.table import Table as RichTable

    from maintd.units import fmt_bytes

    if not rows:
        console.print(
            "no tables registered yet: the daemon registers the tables it finds under warehouse.roots "
            "and those listed in warehouse.tables"
        )
        return
    out = RichTable(title="maintd status (times UTC)")
    for col in ("table", "health", "files", "bytes", "backlog", "last maintenance", "last reclaim", "leased by"):
        out.add_column(col, justify="right" if col in ("files", "bytes", "backlog") else "left")
    for row in rows:
        style = _HEALTH_STYLE.get(row["health"], "")
        health = row["health"] + (f" ({row['consecutive_failures']})" if row["consecutive_failures"] else "")
        backlog = "" if row["backlog_files"] is None else f"{row['backlog_files']} / {fmt_bytes(row['backlog_bytes'])}"
        out.add_row(
            row["uri"],
            f"[{style}]{health}[/{style}]" if style else health,
            "" if row["files"] is None else str(row["files"]),
            "" if row["bytes"] is None else fmt_bytes(row["bytes"]),
            backlog,
            _brief_text(row["last_maintenance"]),
            _brief_text(row["last_reclaim"]),
            row["leased_by"] or "",
        )
    print_table(console, out)
    summary = summarise(rows)
    counts = ", ".join(f"{n} {health}" for health, n in sorted(summary["by_health"].items()))
    console.print(
        f"{summary['tables']} table(s): {counts}; backlog {summary['backlog_files']} file(s), "
        f"{fmt_bytes(summary['backlog_bytes'])}",
        highlight=False,
    )
    print_targets(console, rows)
    for row in rows:
        retry = f" (retry after {_when(row['retry_after'])})" if row["retry_after"] else ""
        for kind in ("maintenance", "reclaim"):
            brief = row[f"last_{kind}"]
            if brief is not None and brief["status"] == "failed":
                console.print(f"[red]{row['uri']}: {kind} failed:[/red] {brief['error']}{retry}", highlight=False)


def print_targets(console: Console, rows: list[dict[str, Any]]) -> None:
    """One line per table with targets: each target, its measured figure and gap, and the last re-tune."""
    for row in rows:
        kept = row.get("targets")
        if not kept:
            continue
        parts = []
        for name, target in kept["targets"].items():
            measured, gap = kept["measured"].get(name), kept["gaps"].get(name)
            shown = "not measured yet" if measured is None else f"{measured:.4g} ({gap:+.0%})"
            parts.append(f"{name} <= {target:g}: {shown}")
        style = "red" if kept["missed"] else "green"
        console.print(f"[{style}]{row['uri']} targets:[/{style}] " + "; ".join(parts), highlight=False)
        last = kept["last_retune"]
        if last["error"]:
            console.print(f"  [red]last re-tune failed {_when(last['error_at'])}:[/red] {last['error']}",
                          highlight=False)
        if last["at"] is not None:
            console.print(f"  re-tuned {_when(last['at'])}: {last['reason']}", highlight=False)
        else:
            console.print("  not re-tuned yet", highlight=False)


def _brief_text(brief: dict[str, Any] | None) -> str:
    if brief is None:
        return "never"
    return f"{brief['status']} {_when(brief['ended_at'] or brief['started_at'])}"


def _when(moment: datetime | None) -> str:
    return "" if moment is None else moment.strftime("%m-%d %H:%M:%S")


# -- history ------------------------------------------------------------------------------------------------


def history_command(
    uri: str | None = typer.Argument(None, help="Only the runs of this table (default: every table)."),
    config: Path | None = typer.Option(None, "--config", help=CONFIG_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print the runs as JSON."),
    limit: int = typer.Option(20, "--limit", min=1, max=10_000, help="Most runs shown, newest first."),
    kind: RunKind | None = typer.Option(None, "--kind", help="Only runs of this kind."),
    status: RunStatus | None = typer.Option(None, "--status", help="Only runs with this status."),
    explain: bool = typer.Option(False, "--explain", help="Also show each run's per-bucket decisions."),
) -> None:
    """Maintenance and reclamation runs recorded by the daemon, newest first (commit log: maintd table history)."""
    with user_errors():
        store = open_store(config)
        try:
            runs = store.history(uri, kind=kind, status=status, limit=limit)
            decisions = {run.id: store.decisions_of(run.id) for run in runs} if explain else {}
        finally:
            store.close()
    if json_out:
        print_json([_run_json(run, decisions.get(run.id)) for run in runs])
        return
    from rich.console import Console

    print_history(Console(), runs, decisions, uri)


def _run_json(run: RunRecord, decisions: list[Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": run.id,
        "table": run.table_uri,
        "kind": run.kind,
        "status": run.status,
        "holder": run.holder,
        "started_at": run.started_at,
        "ended_at": run.ended_at,
        "seconds": run.duration_seconds,
        "metrics": run.metrics,
        "plan": run.plan,
        "error": run.error,
    }
    if decisions is not None:
        out["decisions"] = [
            {
                "partition": d.decision.partition,
                "bucket": d.decision.bucket,
                "action": d.decision.action,
                "rule": d.decision.rule,
                "message": d.decision.message,
            }
            for d in decisions
        ]
    return out


_STATUS_STYLE = {"succeeded": "green", "skipped": "cyan", "failed": "red", "abandoned": "yellow", "running": "blue"}


def print_history(console: Console, runs: list[RunRecord], decisions: dict[int, list[Any]], uri: str | None) -> None:
    from rich.table import Table as RichTable
    if not runs:
        console.print(f"no runs recorded{f' for {uri}' if uri else ''}")
        return
    out = RichTable(title=f"maintd history{f' of {uri}' if uri else ''} (times UTC)")
    for col in ("run", "table", "kind", "status", "started", "time", "what", "holder"):
        out.add_column(col, justify="right" if col in ("run", "time") else "left")
    for run in runs:
        style = _STATUS_STYLE.get(run.status, "")
        seconds = run.duration_seconds
        out.add_row(
            str(run.id),
            run.table_uri,
            run.kind,
            f"[{style}]{run.status}[/{style}]" if style else run.status,
            _when(run.started_at),
            "" if seconds is None else f"{seconds:.1f} s",
            describe_run(run),
            run.holder or "",
        )
    print_table(console, out)
    for run in runs:
        if run.error:
            console.print(f"[red]run {run.id}:[/red] {run.error}", highlight=False)
        for d in decisions.get(run.id, []):
            where = f"{d.decision.partition or '(unpartitioned)'} bucket {d.decision.bucket}"
            console.print(
                f"  run {run.id}: {where}: {d.decision.action} ({d.decision.rule}): {d.decision.message}",
                highlight=False,
            )


def describe_run(run: RunRecord) -> str:
    """One line of what a run did, from its recorded metrics."""
    from maintd.units import fmt_bytes
    m = run.metrics or {}
    if run.kind == RunKind.MAINTENANCE.value and "tasks_planned" in m:
        if not m["tasks_planned"]:
            return "nothing to do"
        return (
            f"{m.get('tasks_committed', 0)}/{m['tasks_planned']} task(s), {m.get('files_before')} -> {m.get('files')} "
            f"file(s), {fmt_bytes(m.get('bytes_written') or 0)} written"
        )
    if run.kind == RunKind.RECLAIM.value and "oldest_retained_version" in m:
        deleted = {"log": m.get("log_files_deleted"), "data": m.get("data_files_deleted"),
                   "orphan": m.get("orphan_files_deleted")}
        if not any(deleted.values()) and not m.get("versions_expired"):
            return f"nothing to reclaim (oldest retained version {m['oldest_retained_version']})"
        verb = "would delete" if m.get("dry_run") else "deleted"
        size = (m.get("data_bytes_deleted") or 0) + (m.get("orphan_bytes_deleted") or 0)
        return (f"{m.get('versions_expired', 0)} version(s) expired (oldest retained {m['oldest_retained_version']}), "
                f"{verb} " + ", ".join(f"{n or 0} {k}" for k, n in deleted.items()) + f" file(s), {fmt_bytes(size)}")
    return ""
