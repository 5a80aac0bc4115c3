"""``maintd read``: read a table (merge-on-read) at a version or time, or its changes between versions."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from maintd.cli._output import fail, print_json, user_errors

if TYPE_CHECKING:
    import pyarrow as pa

def register(app: typer.Typer) -> None:
    """Add ``maintd read`` to the root app."""
    app.command("read")(read_command)


def read_command(
    uri: str = typer.Argument(..., help="Table URI."),
    version: int | None = typer.Option(None, "--version", help="Read this version (time travel)."),
    as_of: str | None = typer.Option(None, "--as-of", help="Read the version current at this ISO-8601 time."),
    changes_from: int | None = typer.Option(None, "--changes-from", help="Print the changes after this version."),
    changes_to: int | None = typer.Option(None, "--changes-to", help="...up to this version (default: latest)."),
    columns: list[str] = typer.Option([], "--column", help="Only these columns; repeat for several."),
    output: Path | None = typer.Option(None, "--output", help="Write all rows to this Parquet file instead."),
    limit: int | None = typer.Option(None, "--limit", min=0, help="Print at most this many rows."),
    json_out: bool = typer.Option(False, "--json", help="Print rows as JSON."),
) -> None:
    """Print the rows of a table at a version or time, or its net changes between two versions."""
    import pyarrow.parquet as pq
    from rich.console import Console

    from maintd.table import Table

    if changes_to is not None and changes_from is None:
        fail("--changes-to needs --changes-from")
    if changes_from is not None and (version is not None or as_of is not None):
        fail("--changes-from reads changes between versions; it cannot be combined with --version or --as-of")
    if output is not None and output.suffix != ".parquet":
        fail(f"--output {output}: the file name must end in .parquet")
    if as_of is not None:
        _check_time(as_of)
    err = Console(stderr=True, soft_wrap=True, highlight=False)
    total: int | str
    with user_errors():
        table = Table.open(uri)
        if changes_from is not None:
            data = table.changes(changes_from, changes_to)
            if columns:
                keep = [c for c in data.column_names if c in columns or c.startswith("_change")]
                data = data.select(keep)
            total = data.num_rows
        else:
            resolved = table.resolve_version(version, as_of)
            if as_of is not None:
                err.print(f"reading version {resolved}, the version current at {as_of}", markup=False)
            if limit is not None and output is None:
                data, total = _first_rows(table, resolved, columns or None, limit)
            else:
                data = table.read(version=resolved, columns=columns or None)
                total = data.num_rows
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(data, output)
        err.print(f"wrote {data.num_rows} rows to {output}")
        return
    shown = data if limit is None else data.slice(0, limit)
    if limit is not None and (not isinstance(total, int) or shown.num_rows < total):
        err.print(f"{shown.num_rows} of {total} rows (--limit {limit})", markup=False)
    if json_out:
        print_json(shown.to_pylist())
        return
    _print_rows(shown)


def _first_rows(table: Any, version: int, columns: list[str] | None, limit: int) -> tuple[pa.Table, int | str]:
    """The first ``limit`` merged rows of ``version``, reading bucket after bucket only until there are enough,
    and the table's row count. The count is exact when the file statistics tell it (every bucket one file), else
    ``at most N`` (a key may have a row in several files; counting them would need the full read avoided)."""
    import pyarrow as pa

    scan = table.scan(version, columns)
    batches: list[pa.RecordBatch] = []
    got = 0
    stream = scan.to_batches()
    ended = limit > 0
    if limit > 0:
        for batch in stream:
            batches.append(batch)
            got += batch.num_rows
            if got >= limit:
                ended = False
                break  # no further unit is read
    rows = pa.Table.from_batches(batches, schema=scan.schema) if batches else scan.schema.empty_table()
    if ended:  # read to the end: the count is what was read
        return rows.slice(0, limit), rows.num_rows
    rows = rows.slice(0, limit)
    snap = table.snapshot(version)
    per_bucket: dict[Any, int] = {}
    for f in snap.files.values():
        key = (tuple(sorted(f.partition.items(), key=str)), f.bucket)
        per_bucket[key] = per_bucket.get(key, 0) + 1
    upper = sum(f.rows - f.delete_rows for f in snap.files.values())
    if all(n == 1 for n in per_bucket.values()):
        return rows, upper
    return rows, f"at most {upper:,}"


def _check_time(text: str) -> None:
    try:
        datetime.fromisoformat(text)
    except ValueError:
        fail(f"--as-of {text!r} is not an ISO-8601 time; write e.g. --as-of 2026-11-22T10:00:00+00:00")


def _print_rows(data: pa.Table) -> None:
    from rich.console import Console
    from rich.table import Table as RichTable
    console = Console(soft_wrap=True, highlight=False)
    if not console.is_terminal:  # plain tab-separated text for pipes
        sys.stdout.write("\t".join(data.column_names) + "\n")
        for row in data.to_pylist():
            sys.stdout.write("\t".join("" if v is None else str(v) for v in row.values()) + "\n")
        return
    out = RichTable(*data.column_names)
    for row in data.to_pylist():
        out.add_row(*("" if v is None else str(v) for v in row.values()))
    console.print(out)
