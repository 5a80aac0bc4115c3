"""Startup cost: the commands people type most import only what they use.

A module-presence test, not a timing test: each command runs in a fresh interpreter, which then reports the
heavy modules it imported. ``maintd --help`` needs typer only (plain help: Rich's help renderer would cost more
than the rest); reading a table's log needs the format (pyarrow, and its Parquet reader for checkpoints), never
pyarrow's dataset layer (which pulls in pandas) or its compute kernels (reading the log computes on no data),
Spark, the state store, the schedulers or the optional engines; ``table describe`` needs no planner.
``status`` and ``history`` read the state store: SQLAlchemy with its SQLite dialect, not Alembic (the schema's
revision is one query; Alembic is for migrating), not the table format or the planner (whose pyarrow and numpy
would cost more than the store).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from maintd import Table

HEAVY = ("pyspark", "pyarrow", "pyarrow.dataset", "pyarrow.compute", "numpy", "pandas", "pydantic", "sqlalchemy",
         "sqlalchemy.dialects.postgresql", "alembic", "apscheduler", "duckdb", "polars", "matplotlib", "loguru", "yaml",
         "prometheus_client", "rich", "maintd.table", "maintd.planner")
NEVER_FOR_A_TABLE = ("pyspark", "pyarrow.dataset", "pyarrow.compute", "pandas", "sqlalchemy", "alembic", "apscheduler",
                     "duckdb", "polars", "matplotlib", "prometheus_client")
NEVER_FOR_THE_STORE = ("pyspark", "pyarrow", "numpy", "pandas", "alembic", "sqlalchemy.dialects.postgresql",
                       "maintd.table", "maintd.planner", "apscheduler", "duckdb", "polars", "matplotlib",
                       "prometheus_client")

PROBE = """
import json, sys
from maintd.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("\\n" + json.dumps(sorted(m for m in sys.modules if m in set(json.loads({heavy!r})))))
"""


def probe(*argv: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[set[str], str]:
    """The heavy modules a command imported, and what it printed."""
    code = PROBE.format(heavy=json.dumps(HEAVY))
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120, env=env,
                         cwd=cwd)
    assert out.returncode == 0, out.stderr
    *printed, loaded = out.stdout.strip().splitlines()
    return set(json.loads(loaded)), "\n".join(printed) + out.stderr


def imported_by(*argv: str) -> set[str]:
    return probe(*argv)[0]


def test_help_imports_no_heavy_module() -> None:
    assert imported_by("--help") == set()


@pytest.mark.parametrize(("command", "never"), [
    (["table", "describe"], ("maintd.planner",)), (["table", "describe", "--json"], ("maintd.planner", "rich")),
    (["plan"], ())])
def test_reading_a_table_imports_no_engine_store_or_scheduler(
    tmp_path: Path, command: list[str], never: tuple[str, ...]
) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64!,name:string", primary_key="id", buckets=2,
                         properties={"log.checkpoint.interval": 2})
    for i in range(3):
        table.upsert([{"id": i, "name": "a"}])
    assert table.log.last_checkpoint_hint() is not None  # the command reads a checkpoint, then commits
    loaded, printed = probe(*command, table.uri)
    assert "version 3" in printed or '"version": 3' in printed, printed
    assert "pyarrow" in loaded, "the probe saw the command read the table"
    unwanted = set(NEVER_FOR_A_TABLE) | set(never)
    assert loaded.isdisjoint(unwanted), sorted(loaded & unwanted)


@pytest.mark.parametrize(("command", "never"), [
    (["status"], ()), (["history"], ()), (["status", "--json"], ("rich",)), (["history", "--json"], ("rich",))])
def test_reading_the_state_store_imports_neither_alembic_nor_the_table_format(
    tmp_path: Path, command: list[str], never: tuple[str, ...]
) -> None:
    from maintd.service.records import RunKind, RunStatus
    from maintd.service.store import StateStore

    url = f"sqlite:///{tmp_path / 'maintd.db'}"
    store = StateStore(url)  # created at the newest revision, as the daemon leaves it
    store.register_table("/wh/t")
    run = store.start_run("/wh/t", RunKind.MAINTENANCE, holder="pod-a:1")
    store.finish_run(run, RunStatus.SUCCEEDED, metrics={"tasks_planned": 1, "tasks_committed": 1, "files": 3,
                                                        "bytes": 4096, "bytes_written": 2048, "backlog_files": 1,
                                                        "backlog_bytes": 1024})
    store.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAINTD_")} | {"MAINTD_STORE__URL": url}
    env["COLUMNS"] = "240"
    loaded, printed = probe(*command, env=env, cwd=tmp_path)
    assert "/wh/t" in printed and ("KiB" in printed or "--json" in command), printed  # the row, sizes and all
    unwanted = set(NEVER_FOR_THE_STORE) | set(never)
    assert loaded.isdisjoint(unwanted), sorted(loaded & unwanted)


def test_the_commands_with_their_own_config_option_are_found_in_the_command_tree() -> None:
    """The root decides from the tree which commands load the default settings; typer builds that tree from
    click or from its own copy of it, so the walk must not depend on either's classes (nor need click)."""
    import typer.main

    from maintd.cli import _takes_config, app

    root = typer.main.get_command(app)
    ctx = typer.Context(root)
    assert {name: _takes_config(ctx, name) for name in ("run", "daemon", "status", "table", "read", "plan")} == {
        "run": True, "daemon": True, "status": True, "table": False, "read": False, "plan": True}


@pytest.mark.parametrize(("argv", "collecting"), [
    (["status", "--help"], False), (["table", "describe", "--help"], False), (["plan", "--help"], False),
    (["daemon", "--help"], True), (["run", "--help"], True)])
def test_the_short_commands_run_without_the_cyclic_collector_and_the_others_with_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, argv: list[str], collecting: bool
) -> None:
    import gc

    import maintd.service.logging
    from maintd.cli import main

    monkeypatch.chdir(tmp_path)
    seen: list[bool] = []
    monkeypatch.setattr(maintd.service.logging, "configure_logging", lambda **_: seen.append(gc.isenabled()))
    with pytest.raises(SystemExit):
        main(argv)
    assert seen == [collecting], "as the root callback left it for the command"
    assert gc.isenabled(), "main turns it back on when the command is done"
