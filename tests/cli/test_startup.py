"""Startup cost: the commands people type most import only what they use.

A module-presence test, not a timing test: each command runs in a fresh interpreter, which then reports the
heavy modules it imported. ``maintd --help`` needs typer only (plain help: Rich's help renderer would cost more
than the rest); reading a table's log needs the format (pyarrow, and its Parquet reader for checkpoints), never
pyarrow's dataset layer (which pulls in pandas), Spark, the state store, the schedulers or the optional engines.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from maintd import Table

HEAVY = ("pyspark", "pyarrow", "pyarrow.dataset", "numpy", "pandas", "pydantic", "sqlalchemy", "alembic",
         "apscheduler", "duckdb", "polars", "matplotlib", "loguru", "yaml", "prometheus_client", "rich")
NEVER_FOR_A_TABLE = ("pyspark", "pyarrow.dataset", "pandas", "sqlalchemy", "alembic", "apscheduler", "duckdb", "polars",
                     "matplotlib", "prometheus_client")

PROBE = """
import json, sys
from maintd.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("\\n" + json.dumps(sorted(m for m in sys.modules if m in set(json.loads({heavy!r})))))
"""


def imported_by(*argv: str) -> set[str]:
    code = PROBE.format(heavy=json.dumps(HEAVY))
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_help_imports_no_heavy_module() -> None:
    assert imported_by("--help") == set()


@pytest.mark.parametrize("command", [["table", "describe"], ["plan"]])
def test_reading_a_table_imports_no_engine_store_or_scheduler(tmp_path: Path, command: list[str]) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64,name:string", primary_key="id", buckets=2,
                         properties={"log.checkpoint.interval": 2})
    for i in range(3):
        table.upsert([{"id": i, "name": "a"}])
    assert table.log.last_checkpoint_hint() is not None  # the command reads a checkpoint, then commits
    loaded = imported_by(*command, table.uri)
    assert "pyarrow" in loaded, "the probe saw the command read the table"
    assert loaded.isdisjoint(NEVER_FOR_A_TABLE), sorted(loaded & set(NEVER_FOR_A_TABLE))


def test_the_commands_with_their_own_config_option_are_found_in_the_command_tree() -> None:
    """The root decides from the tree which commands load the default settings; typer builds that tree from
    click or from its own copy of it, so the walk must not depend on either's classes (nor need click)."""
    import typer.main

    from maintd.cli import _takes_config, app

    root = typer.main.get_command(app)
    ctx = typer.Context(root)
    assert {name: _takes_config(ctx, name) for name in ("run", "daemon", "status", "table", "read", "plan")} == {
        "run": True, "daemon": True, "status": True, "table": False, "read": False, "plan": False}
