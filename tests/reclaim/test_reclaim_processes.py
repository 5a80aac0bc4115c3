"""Reclamation against real processes: killed at every step, and racing a writer that keeps committing."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import traceback
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from freezegun import freeze_time
from reclaim_helpers import History, build, data_files_on_disk, orphan, rows
from waiting import wait_until

from maintd import Table
from maintd.reclaim import reclaim_table
from maintd.table.log.tablelog import RECLAIMED, checkpoint_path, commit_path

WORKER = Path(__file__).with_name("reclaim_worker.py")
HOUR = timedelta(hours=1)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> History:
    """A table of 30 versions, one per hour, retaining 6 hours, with two old orphans."""
    history = build(tmp_path_factory.mktemp("template") / "t", [HOUR] * 30, retain_hours=6, interval=7)
    now = history.times[history.latest] + HOUR / 2
    orphan(Path(history.table.uri), now, hours=5, name="e" * 32)
    orphan(Path(history.table.uri), now, hours=5, name="f" * 32, where="ds=b/bucket-00001")
    return history


@pytest.mark.parametrize(("step", "n"), [("checkpoint", 1), ("log", 1), ("log", 12), ("data", 1), ("data", 9),
                                         ("orphan", 1), ("watermark", 1)])
def test_a_reclamation_killed_at_any_step_leaves_every_retained_version_readable_and_the_next_run_finishes(
        template: History, tmp_path: Path, step: str, n: int) -> None:
    root = tmp_path / "t"
    shutil.copytree(template.table.uri, root)
    history = History(Table.open(str(root)), template.times, template.reads)
    now = history.times[history.latest] + HOUR / 2
    oldest = history.oldest_retained(now, 6)

    killed = subprocess.run([sys.executable, str(WORKER), "reclaim", str(root), now.isoformat(), step, str(n)],
                            capture_output=True, text=True, timeout=120)

    assert killed.returncode == -9, killed.stderr
    with freeze_time(now):
        table = Table.open(str(root))
        for v in range(oldest, history.latest + 1):
            assert rows(table.read(version=v)) == history.reads[v], f"version {v} after a kill at {step} #{n}"
    report = reclaim_table(Table.open(str(root)), now=now, orphan_grace=HOUR)
    assert report.complete and report.oldest_retained_version == oldest
    assert data_files_on_disk(root) == history.live_from(oldest)
    log = {p.name for p in (root / "_log").iterdir()}
    assert Path(checkpoint_path(oldest)).name in log and Path(commit_path(oldest - 1)).name not in log
    assert (root / RECLAIMED).exists() and not any(name.startswith(".tmp-") for name in log)
    with freeze_time(now):
        for v in range(oldest, history.latest + 1):
            assert rows(Table.open(str(root)).read(version=v)) == history.reads[v]


@pytest.mark.slow
def test_writers_committing_in_other_processes_during_reclamation_lose_nothing(tmp_path: Path) -> None:
    """Two writers race each other and a reclamation that keeps only the latest version: a writer whose
    next version is reclaimed while it commits must still land, at a later version, never into the void."""
    table = Table.create(str(tmp_path / "t"), "id:int64!,name:string,ds:string", primary_key="id",
                         partition_by="ds", buckets=4, properties={"acid.data.retain.hours": 0,
                                                                   "log.checkpoint.interval": 5})
    outs = [tmp_path / f"written-{i}.parquet" for i in range(2)]
    writers = [subprocess.Popen([sys.executable, str(WORKER), "write", table.uri, "60", str(out), str(i * 1000)],
                                stderr=subprocess.PIPE, text=True) for i, out in enumerate(outs)]
    stop = threading.Event()
    runs: list[int] = []
    expire_commits: list[int] = []
    errors: list[str] = []

    def reclaim_until_stopped() -> None:
        while not stop.is_set():
            try:  # retain 0: every run expires all but the latest version while the writers commit
                report = reclaim_table(Table.open(table.uri), orphan_grace=timedelta(seconds=30),
                                       force_short_grace=True)
                runs.append(report.files_deleted)
                if report.expire_version is not None:
                    expire_commits.append(report.expire_version)
            except BaseException:  # reported by the assertion below
                errors.append(traceback.format_exc())
                return

    reclaimer = threading.Thread(target=reclaim_until_stopped)
    reclaimer.start()
    results = [w.communicate(timeout=300) for w in writers]
    stop.set()
    reclaimer.join(timeout=120)

    assert [w.returncode for w in writers] == [0, 0], "\n".join(err for _, err in results)
    assert not errors, errors
    assert len(runs) > 3 and sum(runs) > 0
    expected: dict[int, dict[str, object]] = {}
    for out in outs:
        for row in pq.read_table(out).to_pylist():
            if row.pop("op") == 1:
                expected.pop(row["id"], None)
            else:
                expected[row["id"]] = row
    final = Table.open(table.uri)
    assert final.version == 120 + len(expire_commits), "every commit of both writers is a version of the table"
    assert rows(final.read()) == rows(pa.Table.from_pylist(list(expected.values())))
    reclaim_table(final, orphan_grace=timedelta(seconds=30), force_short_grace=True)
    assert data_files_on_disk(Path(table.uri)) == set(final.snapshot().files)


def test_a_writer_process_publishing_into_the_reclaimed_past_takes_it_back_and_lands_later(tmp_path: Path) -> None:
    """The race, forced: a writer process stops right before publishing version v; meanwhile another writer
    commits v and v + 1 and reclamation (retain 0) records what it expires at v + 2 and deletes every commit
    before v + 1. The writer's put-if-absent of v then succeeds, into removed history: it must take it back
    and land at v + 3."""
    table = Table.create(str(tmp_path / "t"), "id:int64!,name:string,ds:string", primary_key="id",
                         partition_by="ds", buckets=2, properties={"acid.data.retain.hours": 0})
    for i in range(3):
        table.upsert(pa.table({"id": [i], "name": [f"n{i}"], "ds": ["a"]}))
    sync = tmp_path / "sync"
    sync.mkdir()
    writer = subprocess.Popen([sys.executable, str(WORKER), "write-paused", table.uri, str(sync)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def paused() -> bool:
            assert writer.poll() is None, writer.communicate()
            return (sync / "paused").exists()

        wait_until(paused, "the writer to reach its publish", timeout=120)
        about_to_publish = (sync / "paused").read_text()
        assert about_to_publish == commit_path(table.version + 1)
        other = Table.open(table.uri)
        for i in range(2):
            other.upsert(pa.table({"id": [100 + i], "name": ["other"], "ds": ["b"]}))
        latest = other.version
        report = reclaim_table(Table.open(table.uri))
        assert report.oldest_retained_version == latest
        assert about_to_publish == commit_path(latest - 1) and not table.log.commit_exists(latest - 1), (
            "the slot the writer publishes to was committed by the other writer and then reclaimed")
        (sync / "resume").touch()
        out, err = writer.communicate(timeout=120)
    finally:
        if writer.poll() is None:
            writer.kill()
    assert writer.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["taken_back"] == 1, "the writer must have published into the reclaimed past once"
    assert report.expire_version == latest + 1, "reclamation recorded what it expires before deleting"
    assert result["version"] == latest + 2, "after the expire record"
    final = Table.open(table.uri)
    assert final.version == latest + 2 and not final.log.commit_exists(latest - 1), "the file was taken back"
    assert {"id": 4242, "name": "paused writer", "ds": "a"} in rows(final.read())
    assert len(rows(final.read())) == 6
