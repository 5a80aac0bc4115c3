"""A damaged table never stops the daemon: it is reported, nothing in it is deleted, the others are maintained."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from waiting import wait_until

from maintd.service.daemon import Daemon
from maintd.service.jobs import TableJobs
from maintd.service.metrics import Metrics
from maintd.service.records import RunKind
from maintd.service.store import StateStore
from maintd.settings import Settings
from maintd.table.log.tablelog import commit_path

from .warehouse import Model, create, read_sorted, write


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    opened = StateStore(f"sqlite:///{tmp_path / 'maintd.db'}")
    yield opened
    opened.close()


def _snapshot_of_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _maintained(store: StateStore, uri: str, kind: RunKind) -> bool:
    """A run of ``kind`` ended, or one found nothing to do (recorded on the table's row, not as a run)."""
    runs = store.history(uri, kind=kind)
    record = store.get_table(uri)
    return bool(runs and runs[0].ended_at) or (record is not None and record.succeeded_at(kind) is not None)


def test_the_daemon_reports_a_corrupt_table_deletes_nothing_in_it_and_maintains_the_others(
        tmp_path: Path, store: StateStore) -> None:
    healthy, model = create(tmp_path / "wh" / "healthy"), Model()
    write(healthy, model, commits=8, seed=1)
    broken = create(tmp_path / "wh" / "broken", properties={"acid.data.retain.hours": "0"})
    write(broken, Model(), commits=8, seed=2)
    commit = Path(broken.uri) / commit_path(5)
    commit.write_bytes(commit.read_bytes()[:-40])  # truncated: its files now look unreferenced
    for p in Path(broken.uri).rglob("*.parquet"):  # and old enough for any grace
        p.touch()
    before = _snapshot_of_files(Path(broken.uri))
    settings = Settings.model_validate({
        "state_dir": str(tmp_path / "state"),
        "warehouse": {"roots": [str(tmp_path / "wh")]},
        "scheduler": {"maintenance_interval_seconds": 3600, "reclamation_interval_seconds": 3600,
                      "jitter_seconds": 0, "max_concurrent_tables": 2},
        "reclaim": {"orphan_grace_hours": 0, "force_short_grace": True},
    })
    jobs = TableJobs(settings, store, Metrics())
    daemon = Daemon(settings, store, jobs.maintain, jobs.reclaim, discover=jobs.discover, metrics=jobs.metrics)
    daemon.start()
    try:
        wait_until(lambda: all(_maintained(store, t.uri, k) for t in (healthy, broken) for k in RunKind),
                   "one maintenance and one reclamation run of every table", timeout=120)
    finally:
        daemon.stop(grace_seconds=30)

    for kind in RunKind:
        run = store.history(broken.uri, kind=kind)[0]
        assert run.status == "failed" and "CorruptLogError" in (run.error or "") and commit.name in (run.error or "")
        healthy_runs = store.history(healthy.uri, kind=kind)
        assert all(r.status == "succeeded" for r in healthy_runs), "a run that found nothing is not recorded"
        record = store.get_table(healthy.uri)
        assert record is not None and record.failures(kind) == 0 and record.succeeded_at(kind) is not None
    assert _snapshot_of_files(Path(broken.uri)) == before, "nothing in the damaged table was touched"
    assert read_sorted(healthy.uri).equals(model.table())
