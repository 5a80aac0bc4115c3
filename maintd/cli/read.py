"""``maintd read``: read a table (merge-on-read) at a version or time, or its changes between versions."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from maintd.cli._output import fail, print_json, user_errors

if TYPE_CHECKING:
    pass

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
    with user_errors():
        table = Table.open(uri)
        if changes_from is not None:
            data = table.changes(changes_from, changes_to)
            if columns:
                keep = [c for c in data.column_names if c in columns or c.startswith("_change")]
                data = data.select(keep)
        else:
            data = table.read(version=version, as_of=as_of, columns=columns or None)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(data, output)
        Console(stderr=True).print(f"wrote {data.num_rows} rows to {output}", highlight=False)
        return
    shown = data if limit is None else data.slice(0, limit)
    if json_out:
        print_json(shown.to_pylist())
        return
    _print_rows(shown, total=data.num_rows)


def _check_time(text: str) -> None:
    try:
        datetime.fromisoformat(text)
    except ValueError:
        fail(f"--as-of {text!r} is not an ISO-8601 time; write e.g. --as-of 2026-11-22T10:00:00+00:00")


def _print_rows(data: pa.Table, *, total: int) -> None:
    from rich.console import Console
    from rich.table import Table as RichTable
    console = Console(soft_wrap=True, highlight=False)
    if not console.is_terminal:  # plain tab-separated text for pipes
        sys.stdout.write("\t".join(data.column_names) + "\n")
        for row in data.to_pylist():
            sys.stdout.write("\t".join("" if v is None else str(v) for v in row.values()) + "\n")
        return
    out = RichTable(*data.column_names, caption=f"{data.num_rows} of {total} rows")
    for row in data.to_pylist():
        out.add_row(*("" if v is None else str(v) for v in row.values()))
    console.print(out)
