"""Schema migrations of the state store (Alembic) on SQLite and PostgreSQL: from maintd 0.1.0's schema,
from nothing, and refusals; ``maintd store upgrade``."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from typer.testing import CliRunner

from maintd.cli import app
from maintd.errors import StateStoreError
from maintd.service import migrations
from maintd.service.records import RunKind, RunStatus
from maintd.service.schema import metadata
from maintd.service.store import StateStore
from maintd.service.store_engine import make_engine

from . import legacy_schema
from .conftest import StoreTarget

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def engine(store_target: StoreTarget) -> Iterator[sa.Engine]:
    """An engine on the (empty) store location, with the PostgreSQL schema created."""
    made = make_engine(store_target.url, store_target.db_schema, 10)
    if store_target.db_schema:
        with made.begin() as conn:
            conn.execute(sa.text(f'CREATE SCHEMA "{store_target.db_schema}"'))
    yield made
    made.dispose()


def create_legacy_store(engine: sa.Engine) -> None:
    """The schema and a few rows, as maintd 0.1.0 wrote them."""
    with engine.begin() as conn:
        legacy_schema.metadata.create_all(conn)
        conn.execute(sa.insert(legacy_schema.tables), [
            {"uri": "/wh/a", "name": "a", "source": "explicit", "registered_at": T0, "enabled": True,
             "last_status": "succeeded", "maintenance_failures": 0, "reclaim_failures": 2},
        ])
        run = conn.execute(sa.insert(legacy_schema.runs).values(
            table_uri="/wh/a", kind="maintenance", status="succeeded", holder="old", started_at=T0, ended_at=T0,
            metrics={"files": 3}).returning(legacy_schema.runs.c.id)).scalar_one()
        conn.execute(sa.insert(legacy_schema.decisions).values(
            run_id=run, partition="", bucket=0, action="compact", rule="r", message="m"))
        conn.execute(sa.insert(legacy_schema.leases).values(table_uri="/wh/a", holder=None, expires_at=T0))


def schema_differences(store_target: StoreTarget, engine: sa.Engine) -> list[Any]:
    """What differs between the model and the database's tables (Alembic's autogenerate comparison)."""
    with engine.connect() as conn:
        if store_target.db_schema:
            conn.execute(sa.text(f'SET search_path TO "{store_target.db_schema}"'))
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(context, metadata)
    return [d for d in diff if not (d[0] == "remove_table" and d[1].name == migrations.VERSION_TABLE)]


def test_a_store_of_maintd_0_1_0_is_upgraded_on_open_and_keeps_its_data(
    store_target: StoreTarget, engine: sa.Engine
) -> None:
    create_legacy_store(engine)
    probe = StateStore(store_target.url, db_schema=store_target.db_schema, create=False)
    with pytest.raises(StateStoreError, match=r"older than this maintd's .*maintd store upgrade"):
        probe.check_schema()
    probe.close()

    store = store_target.open()
    try:
        assert store.schema_revision() == migrations.head()
        [table] = store.list_tables()
        assert (table.uri, table.last_status, table.reclaim_failures, table.layout) == ("/wh/a", "succeeded", 2, None)
        [run] = store.history("/wh/a")
        assert (run.holder, run.metrics) == ("old", {"files": 3}) and len(store.decisions_of(run.id)) == 1
        new = store.start_run("/wh/a", RunKind.MAINTENANCE, now=T0)
        store.finish_run(new, RunStatus.SUCCEEDED, layout={"files": 1}, now=T0)
        table = store.get_table("/wh/a")
        assert table is not None and table.layout == {"files": 1} and table.maintenance_succeeded_at == T0
        store.check_schema()
    finally:
        store.close()
    assert schema_differences(store_target, engine) == []


def test_the_migrations_build_exactly_the_schema_of_the_model(store_target: StoreTarget, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        if store_target.db_schema:
            conn.execute(sa.text(f'SET LOCAL search_path TO "{store_target.db_schema}"'))
        config = migrations._config(conn)
        command.upgrade(config, "head")
        assert migrations.current(conn) == migrations.head()
    assert schema_differences(store_target, engine) == []
    store = store_target.open()  # found current: nothing to do
    assert store.schema_revision() == migrations.head()
    store.close()


def test_an_empty_store_is_created_at_the_newest_revision(store_target: StoreTarget, engine: sa.Engine) -> None:
    store = store_target.open()
    store.close()
    assert schema_differences(store_target, engine) == []


def test_the_revision_check_expects_the_newest_migration() -> None:
    """``check`` compares the recorded revision with ``HEAD_REVISION`` without loading Alembic's scripts:
    a new migration must move it."""
    assert migrations.head() == migrations.HEAD_REVISION


def test_check_passes_a_current_store_and_refuses_an_old_one(store_target: StoreTarget, store: StateStore) -> None:
    store.check_schema()
    _record_revision(store_target, store, '0002')
    with pytest.raises(StateStoreError, match="revision 0002, older than this maintd's 0007"):
        store.check_schema()


def test_a_store_migrated_by_a_newer_maintd_is_refused_naming_the_revision(
    store_target: StoreTarget, store: StateStore
) -> None:
    _record_revision(store_target, store, '9999')
    with pytest.raises(StateStoreError, match="revision 9999, which this maintd does not know"):
        store_target.open()
    with pytest.raises(StateStoreError, match="revision 9999"):
        store.check_schema()


def test_maintd_store_upgrade_upgrades_the_configured_store(
    store_target: StoreTarget, engine: sa.Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_legacy_store(engine)
    monkeypatch.setenv("MAINTD_STORE__URL", store_target.url)
    if store_target.db_schema:
        monkeypatch.setenv("MAINTD_STORE__DB_SCHEMA", store_target.db_schema)
    monkeypatch.chdir(tmp_path)
    status = CliRunner().invoke(app, ["status"])
    assert status.exit_code == 2 and "maintd store upgrade" in status.stderr
    result = CliRunner().invoke(app, ["store", "upgrade"])
    assert result.exit_code == 0, result.output
    assert f"to revision {migrations.head()}" in result.stdout
    again = CliRunner().invoke(app, ["store", "upgrade"])
    assert again.exit_code == 0 and "already at revision" in again.stdout
    assert CliRunner().invoke(app, ["status"]).exit_code == 0


def test_replicas_starting_together_on_an_old_store_migrate_it_once(
    store_target: StoreTarget, engine: sa.Engine
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    create_legacy_store(engine)
    with ThreadPoolExecutor(3) as pool:
        stores = list(pool.map(lambda _: store_target.open(), range(3)))
    try:
        assert {s.schema_revision() for s in stores} == {migrations.head()}
        assert [t.uri for t in stores[0].list_tables()] == ["/wh/a"]
    finally:
        for s in stores:
            s.close()
    assert schema_differences(store_target, engine) == []


def test_with_migrate_on_start_false_an_old_store_is_refused_until_upgraded(
    store_target: StoreTarget, engine: sa.Engine, tmp_path: Path
) -> None:
    from maintd.service.store import open_store
    from maintd.settings import Settings

    create_legacy_store(engine)
    settings = Settings.model_validate({"state_dir": str(tmp_path), "store": {
        "url": store_target.url, "db_schema": store_target.db_schema, "migrate_on_start": False}})
    with pytest.raises(StateStoreError, match="maintd store upgrade"):
        open_store(settings, upgrade=settings.store.migrate_on_start)
    open_store(settings, upgrade=True).close()
    open_store(settings, upgrade=False).close()


def _record_revision(store_target: StoreTarget, store: StateStore, revision: str) -> None:
    """Make the store's recorded schema revision ``revision`` (as an older or a newer maintd would leave it)."""
    with store.engine.begin() as conn:
        if store_target.db_schema:
            conn.execute(sa.text(f'SET LOCAL search_path TO "{store_target.db_schema}"'))
        conn.execute(sa.text(f"UPDATE {migrations.VERSION_TABLE} SET version_num = :rev"), {"rev": revision})


def test_the_layout_measures_of_a_store_at_0005_are_filled_from_its_layouts(
    store_target: StoreTarget, engine: sa.Engine
) -> None:
    """Revision 0006 keeps the measures the fleet histograms read in columns; upgrading fills them from the
    layouts already stored, so the histograms are whole at once, not only after every table ran again."""
    with engine.begin() as conn:
        if store_target.db_schema:
            conn.execute(sa.text(f'SET LOCAL search_path TO "{store_target.db_schema}"'))
        command.upgrade(migrations._config(conn), "0005")
        layouts = sa.table("maintd_tables", sa.column("uri"), sa.column("name"), sa.column("source"),
                           sa.column("registered_at"), sa.column("enabled"), sa.column("layout", sa.JSON()),
                           sa.column("maintenance_failures"), sa.column("reclaim_failures"))
        conn.execute(sa.insert(layouts), [
            {"uri": "/wh/a", "name": "a", "source": "explicit", "registered_at": T0, "enabled": True,
             "maintenance_failures": 0, "reclaim_failures": 0,
             "layout": {"files": 9, "read_amplification": 7, "oldest_l0_ms": 1_700_000_000_000,
                        "history_bytes": 4096, "pinned_bytes": 0}},
            {"uri": "/wh/b", "name": "b", "source": "explicit", "registered_at": T0, "enabled": True,
             "maintenance_failures": 0, "reclaim_failures": 0, "layout": {"files": 1}},
        ])
    store = store_target.open()
    try:
        assert store.schema_revision() == migrations.head()
        with store.engine.connect() as conn:
            from maintd.service.aggregates import layout_measures
            assert sorted(layout_measures(conn), key=str) == sorted(
                [(7.0, 1.7e12, 4096.0, 0.0), (None, None, None, None)], key=str)
        new = store.start_run("/wh/b", RunKind.MAINTENANCE, now=T0)
        store.finish_run(new, RunStatus.SUCCEEDED, layout={"files": 2, "read_amplification": 3}, now=T0)
        with store.engine.connect() as conn:
            assert sorted(layout_measures(conn), key=str) == sorted(
                [(7.0, 1.7e12, 4096.0, 0.0), (3.0, None, None, None)], key=str)
    finally:
        store.close()
    assert schema_differences(store_target, engine) == []


def test_a_store_at_0006_is_upgraded_to_keep_targets_and_keeps_its_tables(
    store_target: StoreTarget, engine: sa.Engine
) -> None:
    """Revision 0007 adds the layout samples and the tuning rows, empty; the tables and their layout measures
    stay, and the first sample of a table that declares targets reads them."""
    with engine.begin() as conn:
        if store_target.db_schema:
            conn.execute(sa.text(f'SET LOCAL search_path TO "{store_target.db_schema}"'))
        command.upgrade(migrations._config(conn), "0006")
        rows = sa.table("maintd_tables", sa.column("uri"), sa.column("name"), sa.column("source"),
                        sa.column("registered_at"), sa.column("enabled"), sa.column("layout", sa.JSON()),
                        sa.column("layout_read_amplification"), sa.column("layout_oldest_l0_ms"),
                        sa.column("maintenance_failures"), sa.column("reclaim_failures"))
        conn.execute(sa.insert(rows), [
            {"uri": "/wh/a", "name": "a", "source": "explicit", "registered_at": T0, "enabled": True,
             "maintenance_failures": 0, "reclaim_failures": 0, "layout": {"files": 9, "read_amplification": 7},
             "layout_read_amplification": 7.0, "layout_oldest_l0_ms": T0.timestamp() * 1000 - 600_000},
        ])
    store = store_target.open()
    try:
        assert store.schema_revision() == migrations.head() == "0007"
        assert [t.uri for t in store.list_tables()] == ["/wh/a"]
        assert store.tuning_records() == {}
        store.set_targets({"/wh/a": {"merge_delay_minutes": 5.0}})
        assert store.sample_layouts(T0) == 1
        assert store.layout_samples(["/wh/a"], T0) == {"/wh/a": [(T0, 7.0, 10.0)]}
    finally:
        store.close()
    assert schema_differences(store_target, engine) == []
