"""``maintd demo``: see what maintd is for in a couple of minutes, on embedded defaults.

It creates a partitioned primary-key table in a local warehouse directory, streams a few hundred
micro-batches of upserts and deletes into it (each one a commit, so small files pile up in every
bucket), and prints the table's health. It then runs maintenance with the packaged policy, in child processes of
this machine (the demo table is below ``spark.maintd.inProcess.maxInputBytes``; a larger one would run on local
Spark). Last, it prints the health again with the read speedup, and checks that the rows read before and after
are identical.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from maintd.cli._output import print_table
from maintd.cli.run import human_bytes, print_summaries

if TYPE_CHECKING:
    from rich.console import Console

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

SCHEMA = "order_id:int64!,region:string!,customer:string,amount:float64,qty:int32,status:string"
REGIONS = ("eu", "us", "apac")
STATUSES = ("new", "paid", "shipped", "returned")
MAX_ROUNDS = 3


def register(app: typer.Typer) -> None:
    """Add ``maintd demo`` to the root app."""
    app.command("demo")(demo_command)


def demo_command(
    warehouse: str | None = typer.Option(None, "--warehouse", help="Directory or object-store URI "
                                         "(s3://bucket/path, gs://, az://) for the demo table (default: a new "
                                         "temporary directory)."),
    batches: int = typer.Option(300, "--batches", min=10, help="Micro-batches (commits) to stream."),
    rows: int = typer.Option(500, "--rows", min=10, help="Rows per micro-batch."),
) -> None:
    """Create a table, pile up small files, run maintenance, and show the difference."""
    from rich.console import Console

    from maintd.cli._output import user_errors

    console = Console()
    with user_errors():  # a bad URI, a missing bucket, refused credentials: one line, exit 2
        ok = run_demo(console, warehouse, batches=batches, rows=rows)
    if not ok:
        raise typer.Exit(1)


def speed_change(before: float, after: float) -> str:
    """How a read time changed, in words that never call a slower read faster (one read is noisy)."""
    if after <= 0 or before <= 0:
        return "too fast to compare"
    if after < before:
        return f"[bold green]{before / after:.1f}x faster[/bold green]"
    if after > before:
        return f"[yellow]{after / before:.1f}x slower[/yellow]"
    return "as fast"


def run_demo(console: Console, warehouse: str | Path | None, *, batches: int = 300, rows: int = 500,
             spark: Any = None) -> bool:
    """The demo itself, in a local directory or under an object-store URI (its storage options from the
    settings or the environment); returns whether the data read before and after maintenance is identical."""
    from maintd import Table
    from maintd.errors import TableExistsError

    root = str(warehouse or Path(tempfile.mkdtemp(prefix="maintd-demo-"))).rstrip("/")
    uri = f"{root}/orders"
    console.rule("[bold]maintd demo")
    console.print(f"warehouse: {root}\n")
    try:
        table = Table.create(uri, SCHEMA, primary_key=["region", "order_id"], partition_by="region", buckets=4,
                             name="orders")
    except TableExistsError:
        console.print(f"[red]{uri} already holds a table;[/red] give another --warehouse directory or URI")
        return False
    from maintd.execution.runner import Runner

    console.print("1. A primary-key table [bold]orders[/bold], partitioned by region (3), 4 buckets per partition.")
    ingest_seconds = _stream(console, table, batches, rows)
    console.print(f"   {batches} commits in {ingest_seconds:.1f} s\n")

    before_rows, before_read = _timed_read(table)
    before = _health(table)
    _print_health(console, "2. Health after streaming: small files pile up in every bucket", before, before_read)

    console.print("3. maintd run: plan with the packaged policy, rewrite buckets (a plan this small in child "
                  "processes of this machine, a larger one on local Spark), commit")
    runner = Runner(None, spark=spark)
    summaries = []
    for _ in range(MAX_ROUNDS):  # clustering, then compaction, as the policy decides
        s = runner.run_table(table.uri)
        if s.status == "nothing":
            break
        summaries.append(s)
        if not s.ok:
            break
    if summaries:
        print_summaries(console, summaries)
    after_rows, after_read = _timed_read(table)
    after = _health(table)
    _print_health(console, "4. Health after maintenance", after, after_read)
    same = before_rows.equals(after_rows)
    console.print(f"read time {before_read * 1000:.0f} ms -> {after_read * 1000:.0f} ms "
                  f"({speed_change(before_read, after_read)}); files {before[0]} -> {after[0]}")
    if same:
        console.print(f"[green]check:[/green] the {after_rows.num_rows:,} rows read before and after are identical")
    else:
        console.print("[red]check failed:[/red] the rows read after maintenance differ from those before")
    console.print(f"\nTry: maintd run {table.uri} --dry-run")
    return same and all(s.ok for s in summaries)


def _stream(console: Console, table: Any, batches: int, rows: int) -> float:
    import numpy as np
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    rng = np.random.default_rng(42)
    keyspace = batches * rows // 4  # ~4 versions per key: updates and deletes have something to hit
    started = time.monotonic()
    columns = [TextColumn("   streaming upserts and deletes"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task("stream", total=batches)
        for _ in range(batches):
            table.write_changes(_batch(rng, rows, keyspace), "op")
            bar.advance(task)
    return time.monotonic() - started


def _batch(rng: np.random.Generator, rows: int, keyspace: int) -> pa.Table:
    import numpy as np
    import pyarrow as pa

    keys = (rng.zipf(1.2, rows) + rng.integers(0, keyspace, rows)) % keyspace
    return pa.table({
        "order_id": pa.array(keys, pa.int64()),
        "region": pa.array(np.asarray(REGIONS)[keys % len(REGIONS)]),
        "customer": pa.array([f"customer-{k % 5000:05d}" for k in keys]),
        "amount": pa.array(np.round(rng.random(rows) * 500, 2)),
        "qty": pa.array(rng.integers(1, 20, rows, dtype=np.int32)),
        "status": pa.array(rng.choice(STATUSES, rows)),
        "op": pa.array((rng.random(rows) < 0.15).astype(np.int8)),
    })


def _timed_read(table: Any) -> tuple[pa.Table, float]:
    best = float("inf")
    data = None
    for _ in range(2):
        t0 = time.monotonic()
        data = table.read()
        best = min(best, time.monotonic() - t0)
    assert data is not None
    return data.sort_by([("region", "ascending"), ("order_id", "ascending")]), best


def _health(table: Any) -> tuple[int, int, dict[str, tuple[int, int]], int]:
    from maintd.execution.runner import TableHealth

    snap = table.snapshot()
    h = TableHealth.of(snap)
    return h.files, h.bytes, h.by_level, len(snap.by_bucket())


def _print_health(console: Console, title: str, health: tuple[int, int, dict[str, tuple[int, int]], int],
                  read_seconds: float) -> None:
    from rich.table import Table as RichTable
    files, nbytes, by_level, buckets = health
    t = RichTable(title=title, title_justify="left")
    for col in ("level", "files", "bytes", "files per bucket"):
        t.add_column(col, justify="left" if col == "level" else "right")
    for level, (n, b) in by_level.items():
        t.add_row(level, f"{n:,}", human_bytes(b), f"{n / max(1, buckets):.1f}")
    t.add_row("[bold]total", f"[bold]{files:,}", f"[bold]{human_bytes(nbytes)}", f"{files / max(1, buckets):.1f}")
    print_table(console, t)
    console.print(f"   full read (merge-on-read of {buckets} buckets): {read_seconds * 1000:.0f} ms\n")
