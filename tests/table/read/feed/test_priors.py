"""Prior-rows files (``changes.prior.rows``): what compactions store, how the change feed uses them, the protocol,
and their life in the log and on storage (docs/format.md, "Prior rows")."""

from __future__ import annotations

import io
import json
import shutil
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest.mock import patch

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from loguru import logger

from maintd import InvalidInputError, Table
from maintd.errors import InvalidPropertyError
from maintd.execution import (
    ExecutionOptions,
    PlanDoc,
    PlanTaskDoc,
    commit_rewrites,
    rewrite,
    run_plan,
    run_task,
    task_specs,
)
from maintd.execution.prior import PriorWriter
from maintd.reclaim import reclaim_table
from maintd.reclaim.engine import list_files
from maintd.reclaim.files import PartitionFilter, expired_data_files, find_orphans
from maintd.table.files.schema import OP_COLUMN, OP_DELETE, VERSION_COLUMN
from maintd.table.log import features
from maintd.table.log.actions import PriorRows
from maintd.table.log.checkpoint import decode_checkpoint, encode_checkpoint
from maintd.table.log.tablelog import commit_path
from maintd.table.read.feed import GroupPriors

from ...table_helpers import feed_reads

PRIOR = {"changes.prior.rows": "true"}


def _batch(rng: np.random.Generator, n: int, keyspace: int, composite: bool, deletes: float = 0.2,
           partitioned: bool = False, offset: int = 0, text: bool = False) -> pa.Table:
    k = rng.integers(offset, offset + keyspace, n)
    cols: dict[str, Any] = ({"a": pa.array(k % 3, pa.int64()), "b": [f"k{x:06d}" for x in k]} if composite
                            else {"id": pa.array(k, pa.int64())})
    if partitioned:  # a key lives in one partition
        cols["ds"] = pa.array(np.where(k % 2 == 0, "even", "odd"))
    if text:  # a text column of few values: dictionary-encoded in every file, merged as a dictionary
        cols["c"] = pa.array([(None, "x", "y")[i] for i in rng.integers(0, 3, n)], pa.string())
    return pa.table({**cols, "v": rng.random(n), "op": pa.array((rng.random(n) < deletes).astype(np.int8))})


def _create(root: Path, composite: bool, buckets: int = 2, properties: dict[str, str] | None = None,
            partitioned: bool = False, text: bool = False) -> Table:
    schema = "a:int64!,b:string!,v:float64" if composite else "id:int64!,v:float64"
    return Table.create(str(root), schema + (",ds:string" if partitioned else "") + (",c:string" if text else ""),
                        primary_key=("a", "b") if composite else "id", buckets=buckets,
                        partition_by="ds" if partitioned else (),
                        properties=PRIOR if properties is None else properties)


def _compact(table: Table, target_file_bytes: int | None = None, options: ExecutionOptions | None = None) -> Any:
    """Compact every bucket (every file of it), committed; returns the run's results."""
    snap = table.snapshot()
    tasks = [PlanTaskDoc(task_id=f"compact-{dict(part)}-{b}", kind="compact", partition=dict(part), bucket=b,
                         inputs=tuple(sorted(f.path for f in files)), target_file_bytes=target_file_bytes)
             for (part, b), files in sorted(snap.by_bucket().items(), key=lambda kv: kv[0][1])]
    plan = PlanDoc(table_uri=table.uri, read_version=snap.version, tasks=tuple(tasks))
    results = run_plan(plan, table, None, options or ExecutionOptions()).results
    assert all(r.ok for r in results), [r.error for r in results]
    assert commit_rewrites(table, plan, results).committed
    return results


def _keyed(t: pa.Table) -> pa.Table:
    return t.sort_by([(c, "ascending") for c in t.column_names if not c.startswith("_") or c == "_change"])


# -- what a compaction stores ------------------------------------------------------------------------------------


def test_a_compaction_stores_the_base_rows_of_the_changed_keys_and_markers_for_new_ones(tmp_path: Path) -> None:
    table = _create(tmp_path / "t", composite=False, buckets=1)
    table.upsert(pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()), "v": [1.0, 2.0, 3.0, 4.0]}))
    _compact(table)
    base = next(iter(table.snapshot().files))
    below = table.snapshot().files[base].max_version
    v1 = table.upsert(pa.table({"id": pa.array([2, 9], pa.int64()), "v": [20.0, 90.0]}))
    v2 = table.delete(pa.table({"id": pa.array([3, 11], pa.int64())}))
    v3 = table.upsert(pa.table({"id": pa.array([2], pa.int64()), "v": [21.0]}))
    deltas = {p for p, f in table.snapshot().files.items() if f.kind == "delta"}
    (result,) = _compact(table)

    (prior,) = result.priors
    assert prior.of == (base,) and set(prior.deltas) == deltas and prior.below == below
    assert (prior.keys, prior.rows, prior.delta_rows, prior.key_lo, prior.key_hi) == (4, 2, 5, None, None)
    assert Path(prior.path).name.startswith("prior-") and prior.path.startswith("bucket-00000/")
    rows = pq.read_table(Path(table.uri) / prior.path).to_pylist()
    assert [(r["id"], r["v"], r[OP_COLUMN], r[VERSION_COLUMN]) for r in rows] == [
        (2, 2.0, 0, 1), (2, 20.0, 0, v1), (2, 21.0, 0, v3),  # the BaseFile's row, then every DeltaFile row
        (3, 3.0, 0, 1), (3, None, OP_DELETE, v2),
        (9, 90.0, 0, v1), (11, None, OP_DELETE, v2),
        (9, None, OP_DELETE, 0), (11, None, OP_DELETE, 0)]  # no BaseFile row: markers, after the chunk's rows
    snap = table.snapshot()
    assert set(snap.priors) == {prior.path} and snap.priors[prior.path].deletion_time == snap.timestamp
    assert snap.priors_of(base) == [snap.priors[prior.path]] and prior.path in snap.referenced()


def test_a_table_without_the_property_and_a_compaction_without_base_files_store_none(tmp_path: Path) -> None:
    plain = _create(tmp_path / "plain", composite=False, properties={})
    assert not features.supports(plain.snapshot().protocol, features.PRIOR_ROWS)
    assert plain.snapshot().protocol.min_writer_version == 2
    on = _create(tmp_path / "on", composite=False)
    rng = np.random.default_rng(2)
    for table in (plain, on):
        for _ in range(3):
            table.write_changes(_batch(rng, 50, 200, False), "op")
        assert all(not r.priors for r in _compact(table))  # the first compaction: DeltaFiles only
        table.write_changes(_batch(rng, 50, 200, False), "op")
        results = _compact(table)
        assert bool(any(r.priors for r in results)) == (table is on)
    assert not plain.snapshot().priors and not list(Path(plain.uri).rglob("prior-*"))


def _prior_rows(table: Table, prior: PriorRows) -> pa.Table:
    """The rows of a prior-rows file, sorted (the chunks a merge passes, and so the file's order, differ)."""
    t = pq.read_table(Path(table.uri) / prior.path)
    return t.select([*table.snapshot().metadata.column_names, OP_COLUMN, VERSION_COLUMN]).sort_by(
        [("id", "ascending"), (VERSION_COLUMN, "ascending")])


def test_a_spilling_unit_stores_the_prior_rows_a_streaming_one_does(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Spilled runs keep every row version when the unit stores prior rows (a run of a plain compaction keeps
    the newest only): the last pass sees each changed key's BaseFile row and all of its DeltaFile rows."""
    rng = np.random.default_rng(4)
    table = _create(tmp_path / "stream", composite=False, buckets=1)
    table.write_changes(_batch(rng, 3000, 6000, False, deletes=0), "op")
    _compact(table)
    start = table.version
    for _ in range(24):
        table.write_changes(_batch(rng, 40, 8000, False), "op")
    end = table.version
    copy = Table.open(str(shutil.copytree(table.uri, tmp_path / "spill")))
    spill = _compact(copy, options=ExecutionOptions(task_memory_bytes=60_000))
    seen = feed_reads(monkeypatch)
    assert spill[0].mode == "spill" and spill[0].priors and spill[0].priors[0].keys > 0
    got = copy.changes(start, end)
    assert seen == [], "the feed read data files after the spilled compaction"
    assert _keyed(got).equals(_keyed(copy.full_changes(start, end)))
    monkeypatch.setattr(rewrite, "fits_in_memory", lambda spec: False)  # the streamed merge, in one pass
    stream = _compact(table, options=ExecutionOptions(in_process_workers="threads"))  # where the patch applies
    assert stream[0].mode == "stream" and stream[0].priors
    (a,), (b,) = stream[0].priors, spill[0].priors
    assert (a.keys, a.rows, a.delta_rows, a.below) == (b.keys, b.rows, b.delta_rows, b.below)
    assert _prior_rows(table, a).equals(_prior_rows(copy, b))


def test_every_key_range_of_a_compaction_stores_prior_rows_and_the_feed_reads_no_data_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compaction split into key ranges: one below every BaseFile (its keys get markers, it answers for the
    task's BaseFiles), some that no DeltaFile reaches (an empty file naming one of the task's DeltaFiles).
    Every unit writes its file, so they form a whole record and the feed over the folded commits reads them
    only."""
    table = _create(tmp_path / "t", composite=False, buckets=1)
    rng = np.random.default_rng(6)
    table.upsert(pa.table({"id": pa.array(np.arange(1000, 6000), pa.int64()), "v": rng.random(5000)}))
    _compact(table, target_file_bytes=8000)
    start, bases = table.version, set(table.snapshot().files)
    assert len(bases) > 3
    table.upsert(pa.table({"id": pa.array([5, 7, 1100, 1500], pa.int64()), "v": rng.random(4)}))  # low keys only
    table.delete(pa.table({"id": pa.array([6, 1200], pa.int64())}))
    deltas = {p for p, f in table.snapshot().files.items() if f.kind == "delta"}
    end = table.version
    results = _compact(table, target_file_bytes=8000, options=ExecutionOptions(task_input_bytes=12_000))
    priors = sorted(results[0].priors, key=lambda p: p.unit)
    assert results[0].units == len(priors) > 3 and [p.unit for p in priors] == list(range(len(priors)))
    low = priors[0]  # keys below every BaseFile: 5, 6 and 7
    assert set(low.of) == bases and low.keys == 3 and low.rows == 0 and low.key_lo is None
    assert low.below == max(f.max_version for f in Table.open(table.uri).snapshot(start).files.values())
    untouched = [p for p in priors if p.keys == 0]
    assert untouched and all(len(p.deltas) == 1 and set(p.deltas) <= deltas and set(p.of) < bases for p in untouched)
    assert all(pq.read_table(Path(table.uri) / p.path).num_rows == 0 for p in untouched)
    seen = feed_reads(monkeypatch)
    for lo, hi in [(start, end), (start, start + 1), (start + 1, end)]:
        got = table.changes(lo, hi)
        assert seen == [], f"({lo}, {hi}]: the feed read data files: {seen}"
        assert _keyed(got).equals(_keyed(table.full_changes(lo, hi)))


# -- the change feed ---------------------------------------------------------------------------------------------


UNITS = {"one unit": ExecutionOptions(), "key ranges": ExecutionOptions(task_input_bytes=12_000),
         "key ranges, some spilled": ExecutionOptions(task_input_bytes=12_000, task_memory_bytes=40_000)}


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.booleans(), st.booleans(), st.integers(1, 3), st.sampled_from([None, 2_000]),
       st.sampled_from(sorted(UNITS)))
def test_the_feed_with_prior_rows_equals_the_full_diff_between_any_two_versions(seed: int, composite: bool,
                                                                                partitioned: bool, rounds: int,
                                                                                target: int | None, units: str
                                                                                ) -> None:
    """Random histories of writes and compactions (some into several BaseFiles per bucket, so later
    compactions rewrite some of them; some in several key ranges, some of which spill, lie below every
    BaseFile or hold no DeltaFile); every (start, end] is compared with the full diff, and how the feed read
    each group, and the units that answer for their task's files, are counted."""
    rng = np.random.default_rng(seed)
    ways: list[str] = []
    record = GroupPriors.record

    def counted_record(self: GroupPriors, *args: Any) -> Any:
        found = record(self, *args)
        ways.append("a whole record" if found else "BaseFile answers" if self.priors else "data files")
        return found

    init = PriorWriter.__init__

    def counted_init(self: PriorWriter, storage: Any, spec: Any, *args: Any, **kwargs: Any) -> None:
        init(self, storage, spec, *args, **kwargs)
        kinds = {f.kind for f in spec.inputs}
        if spec.task_priors is not None:
            ways.append("a unit beside every BaseFile" if "base" not in kinds else "a unit no DeltaFile reaches")

    with (tempfile.TemporaryDirectory() as tmp, patch.object(GroupPriors, "record", counted_record),
          patch.object(PriorWriter, "__init__", counted_init)):
        table = _create(Path(tmp) / "t", composite, partitioned=partitioned, text=True)
        # more than 1,024 rows per bucket: compactions into BaseFiles of 2,000 bytes write several; keys from
        # 100 up, so that later keys below 100 make key ranges below every BaseFile
        table.write_changes(_batch(rng, 2500, 3000, composite, deletes=0, partitioned=partitioned, offset=100,
                                   text=True), "op")
        for _ in range(rounds):
            for _ in range(int(rng.integers(1, 4))):
                batch = _batch(rng, int(rng.integers(5, 120)), 400, composite, partitioned=partitioned, text=True)
                table.write_changes(batch, "op")
            _compact(table, target_file_bytes=target, options=UNITS[units])
        for _ in range(int(rng.integers(1, 4))):
            batch = _batch(rng, int(rng.integers(5, 60)), 500, composite, partitioned=partitioned, text=True)
            table.write_changes(batch, "op")
        for r in _compact(table, target_file_bytes=target, options=UNITS[units]):
            event(f"last compaction: {'one unit' if r.units == 1 else 'key ranges'}, {r.mode}")
        end = table.version
        for start in sorted({0, *rng.integers(0, end, 6).tolist()}):
            for stop in sorted({end, *rng.integers(start, end + 1, 3).tolist()}):
                got, want = table.changes(start, stop), table.full_changes(start, stop)
                assert _keyed(got).equals(_keyed(want)), (start, stop)
    for way in sorted(set(ways)):
        event(way if way.startswith("a unit") else f"a group read from {way}")


def _changed_after_compaction(root: Path) -> tuple[Table, int, int, set[str]]:
    """A compacted one-bucket table, 30 changes spread over its keys, compacted again: (table, start, end,
    the BaseFiles live at start)."""
    table = _create(root, composite=False, buckets=1)
    rng = np.random.default_rng(5)
    table.write_changes(_batch(rng, 5000, 5000, False, deletes=0), "op")
    _compact(table)
    start = table.version
    bases = set(table.snapshot().files)
    for _ in range(3):
        table.write_changes(_batch(rng, 10, 6000, False), "op")
    end = table.version
    return table, start, end, bases


def test_after_a_compaction_the_feed_reads_its_prior_rows_file_and_no_data_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table, start, end, bases = _changed_after_compaction(tmp_path / "t")
    changed = {p for p, f in table.snapshot().files.items() if f.kind == "delta"}
    seen = feed_reads(monkeypatch)
    before = table.changes(start, end)
    assert bases | changed == set(seen)  # not compacted yet: BaseFiles for the prior rows, the changed files whole
    _compact(table)
    for lo, hi in [(start, end), (start, start + 1), (start + 1, end)]:
        seen.clear()
        got = table.changes(lo, hi)
        assert seen == [], f"({lo}, {hi}]: the feed read data files: {seen}"
        assert _keyed(got).equals(_keyed(table.full_changes(lo, hi)))
    assert _keyed(table.changes(start, end)).equals(_keyed(before))


def test_a_range_past_the_compaction_reads_prior_rows_for_its_start_and_data_files_for_its_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writes after the compaction are in no prior-rows file: the feed reads them and the new BaseFile, and
    still takes the old BaseFiles' rows from the prior-rows file for the keys it lists (here: all of them)."""
    table, start, _end, bases = _changed_after_compaction(tmp_path / "t")
    _compact(table)
    new_bases = set(table.snapshot().files)
    (prior,) = table.snapshot().priors
    listed = pq.read_table(Path(table.uri) / prior, columns=["id"]).column("id").unique()
    table.upsert(pa.table({"id": listed.slice(0, 5), "v": [0.5] * 5}))  # keys the prior-rows file lists
    seen = feed_reads(monkeypatch)
    got = table.changes(start)
    assert not bases & set(seen) and new_bases <= set(seen)
    assert _keyed(got).equals(_keyed(table.full_changes(start)))
    table.upsert(pa.table({"id": pa.array([10**6], pa.int64()), "v": [0.5]}))  # a key it does not list
    seen.clear()
    assert _keyed(table.changes(start)).equals(_keyed(table.full_changes(start)))
    assert bases <= set(seen)  # that key's prior row is read from the old BaseFile


def test_a_prior_rows_file_that_cannot_be_read_is_not_used_and_the_feed_is_still_right(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table, start, end, bases = _changed_after_compaction(tmp_path / "t")
    _compact(table)
    (prior,) = table.snapshot().priors
    (Path(table.uri) / prior).write_bytes(b"not parquet")
    seen = feed_reads(monkeypatch)
    messages: list[str] = []
    sink = logger.add(lambda m: messages.append(str(m)), level="WARNING")
    try:
        got = table.changes(start, end)
    finally:
        logger.remove(sink)
    assert bases <= set(seen)
    assert any(prior in m and "reads the data files instead" in m for m in messages)
    assert _keyed(got).equals(_keyed(table.full_changes(start, end)))


def test_a_prior_rows_file_is_used_only_where_all_its_base_files_are_live(tmp_path: Path) -> None:
    """A prior-rows file of two BaseFiles says nothing about a version where only one of them was live: the
    feed over such a version reads the files themselves (and equals the full diff)."""
    table = _create(tmp_path / "t", composite=False, buckets=1)
    rng = np.random.default_rng(6)
    table.write_changes(_batch(rng, 6000, 6000, False, deletes=0), "op")
    _compact(table, target_file_bytes=1500)  # row groups of 1,024 rows, one per BaseFile
    assert len(table.snapshot().files) > 2
    for _ in range(2):  # changes in the lowest keys only: a compaction rewrites the first BaseFiles
        low = pa.table({"id": pa.array(rng.integers(0, 30, 8), pa.int64()), "v": rng.random(8)})
        table.upsert(low)
        _compact(table, target_file_bytes=1500)
    table.write_changes(_batch(rng, 60, 6000, False), "op")
    _compact(table, target_file_bytes=1500)
    snap = table.snapshot()
    assert len(snap.priors) >= 3 and any(len(p.of) > 1 for p in snap.priors.values())
    for start in range(table.version):
        assert _keyed(table.changes(start)).equals(_keyed(table.full_changes(start)))


# -- the protocol and the property -------------------------------------------------------------------------------


def test_setting_the_property_raises_the_protocol_and_a_bad_value_names_itself(tmp_path: Path) -> None:
    table = _create(tmp_path / "t", composite=False, properties={})
    with pytest.raises(InvalidPropertyError, match=r"changes.prior.rows='yes' is not one of false, true, lookup"):
        table.set_properties({"changes.prior.rows": "yes"})
    table.set_properties({"changes.prior.rows": "TRUE"})
    snap = table.snapshot()
    assert snap.metadata.properties["changes.prior.rows"] == "true" and snap.stores_prior_rows
    assert (snap.protocol.min_reader_version, snap.protocol.min_writer_version) == (4, 4)
    head = json.loads((Path(table.uri) / commit_path(table.version)).read_text().splitlines()[0])
    assert head["header"]["format"] == 4
    table.set_properties({"changes.prior.rows": "false"})  # off again: no more files, the protocol stays
    assert not table.snapshot().stores_prior_rows and table.snapshot().protocol.min_writer_version == 4


def test_a_transaction_refuses_prior_rows_below_protocol_4_or_for_a_file_it_does_not_remove(tmp_path: Path) -> None:
    plain = _create(tmp_path / "plain", composite=False, properties={})
    plain.upsert(pa.table({"id": pa.array([1], pa.int64()), "v": [1.0]}))
    live = next(iter(plain.snapshot().files))
    prior = PriorRows(path="bucket-00000/prior-" + "0" * 32 + ".parquet", of=(live,), deltas=("d.parquet",),
                      bucket=0, below=0, keys=1, rows=1, delta_rows=1, bytes=10)
    with pytest.raises(InvalidInputError,
                       match=r"reader 2, writer 2\) lacks feature priorRows .*changes\.prior\.rows to true"):
        plain.new_transaction("X").add_prior(prior)
    on = _create(tmp_path / "on", composite=False)
    on.upsert(pa.table({"id": pa.array([1], pa.int64()), "v": [1.0]}))
    txn = on.new_transaction("X")
    txn.add_prior(prior.model_copy(update={"of": (next(iter(on.snapshot().files)),)}))
    with pytest.raises(InvalidInputError, match="which this commit does not remove"):
        txn.commit()
    with pytest.raises(ValueError, match="at most one BaseFile row per key"):
        PriorRows(path="p.parquet", of=("b.parquet",), deltas=("d.parquet",), bucket=0, below=0, keys=1, rows=2,
                  delta_rows=0, bytes=1)
    with pytest.raises(ValueError, match="are different files"):
        PriorRows(path="p.parquet", of=("b.parquet",), deltas=("b.parquet",), bucket=0, below=0, keys=1, rows=1,
                  delta_rows=0, bytes=1)


def test_prior_rows_survive_a_checkpoint_and_go_with_their_tombstones_below_the_watermark(tmp_path: Path) -> None:
    table, _start, _end, bases = _changed_after_compaction(tmp_path / "t")
    _compact(table)
    snap = table.snapshot()
    data = encode_checkpoint(snap)
    back = decode_checkpoint(data, uri=table.uri, path="cp", version=snap.version).build()
    assert back.priors == snap.priors and back.tombstones.keys() == snap.tombstones.keys()
    meta = pq.ParquetFile(io.BytesIO(data)).schema_arrow.metadata
    assert meta[b"format"] == b"4"  # readers of format 3 refuse it by its number, before a line they do not know
    (prior,) = snap.priors.values()
    table.log.advance_reclaimed_watermark(snap.version, prior.deletion_time - 1)
    assert table.log.prune_tombstones(snap).priors == snap.priors
    table.log.advance_reclaimed_watermark(snap.version, prior.deletion_time)
    pruned = table.log.prune_tombstones(snap)
    assert not pruned.priors and not bases & pruned.tombstones.keys()


# -- reclamation -------------------------------------------------------------------------------------------------


def test_reclamation_deletes_a_prior_rows_file_with_its_base_files_and_not_before(tmp_path: Path) -> None:
    table, start, end, bases = _changed_after_compaction(tmp_path / "t")
    table.set_properties({"acid.data.retain.hours": 1})
    _compact(table)
    (prior,) = table.snapshot().priors
    root = Path(table.uri)
    now = datetime.now(UTC)

    reclaim_table(table, now=now)  # within retention: everything stays, the prior-rows file is no orphan
    assert (root / prior).exists() and all((root / b).exists() for b in bases)
    # no grace at all: a file no entry references would go now; the prior-rows file is referenced
    report = reclaim_table(table, now=now + timedelta(minutes=30), orphan_grace=timedelta(0), force_short_grace=True)
    assert (root / prior).exists() and report.orphan_files_deleted == 0
    assert _keyed(table.changes(start, end)).equals(_keyed(table.full_changes(start, end)))

    report = reclaim_table(table, now=now + timedelta(hours=2))
    assert not (root / prior).exists() and not any((root / b).exists() for b in bases)
    assert report.data_files_deleted >= len(bases) + 1 and report.orphan_files_deleted == 0
    latest = Table.open(table.uri).snapshot()
    assert not table.log.prune_tombstones(latest).priors  # the watermark passed it: checkpoints leave it out


def test_an_unreferenced_prior_rows_file_is_an_orphan_deleted_after_the_grace(tmp_path: Path) -> None:
    table, *_ = _changed_after_compaction(tmp_path / "t")
    stray = Path(table.uri) / "bucket-00000" / f"prior-{'b' * 32}.parquet"
    stray.write_bytes(b"PAR1 of a compaction whose commit did not land")
    now = datetime.now(UTC)
    reclaim_table(table, now=now)
    assert stray.exists()  # within the grace: its compaction may be about to commit it
    reclaim_table(table, now=now + timedelta(days=8))
    assert not stray.exists()


# -- failures ----------------------------------------------------------------------------------------------------


def _prior_files(table: Table) -> set[str]:
    return {p.relative_to(table.uri).as_posix() for p in Path(table.uri).rglob("prior-*.parquet")}


def test_a_failed_unit_deletes_its_prior_rows_file(tmp_path: Path) -> None:
    """The unit itself deletes what it wrote (its run's clean-up by name comes on top, for a killed worker)."""
    table, *_ = _changed_after_compaction(tmp_path / "t")
    snap = table.snapshot()
    task = PlanTaskDoc(task_id="compact-0", kind="compact", bucket=0, inputs=tuple(sorted(snap.files)))
    plan = PlanDoc(table_uri=table.uri, read_version=snap.version, tasks=(task,))
    (spec,) = task_specs(plan, snap, ExecutionOptions(faults={"compact-0": "after_first_chunk"}))
    assert spec.prior_rows
    result = run_task(spec)
    assert not result.ok and "injected fault" in (result.error or "") and not result.priors
    assert _prior_files(table) == set()
    (result,) = run_plan(plan, table, None, ExecutionOptions(faults={"compact-0": "after_first_chunk"})).results
    assert not result.ok and _prior_files(table) == set()


def test_a_compaction_that_loses_to_a_concurrent_one_deletes_its_prior_rows_file(tmp_path: Path) -> None:
    """Two compactions of the same files: the first commits, the second's inputs are gone; all it wrote, its
    prior-rows file included, is deleted (its commit certainly did not land)."""
    table, *_ = _changed_after_compaction(tmp_path / "t")
    snap = table.snapshot()
    task = PlanTaskDoc(task_id="compact-0", kind="compact", bucket=0, inputs=tuple(sorted(snap.files)))
    plan = PlanDoc(table_uri=table.uri, read_version=snap.version, tasks=(task,))
    first, second = (run_plan(plan, table).results for _ in range(2))
    assert first[0].priors and second[0].priors and _prior_files(table) == {first[0].priors[0].path,
                                                                             second[0].priors[0].path}
    assert commit_rewrites(table, plan, first).committed
    outcome = commit_rewrites(table, plan, second)
    assert outcome.dropped == ["compact-0"] and outcome.conflicts == 1
    assert _prior_files(table) == set(table.snapshot().priors) == {first[0].priors[0].path}


def test_the_plan_of_a_reclamation_names_prior_rows_files_as_data_with_their_base_files_never_as_orphans(
        tmp_path: Path) -> None:
    """Each layer on its own: the listing's prior-rows file is not an orphan however old, and it is a data file
    to delete exactly when its BaseFiles' tombstones are."""
    table, *_ = _changed_after_compaction(tmp_path / "t")
    _compact(table)
    snap = table.snapshot()
    (prior,) = snap.priors.values()
    listing = list_files(table)
    everything = PartitionFilter(snap.metadata.partition_by)
    far = listing.at_ms + 10**9
    assert prior.path in listing and prior.path not in {f.path for f in find_orphans(snap, listing, far, 0,
                                                                                         everything).files}
    ours = {prior.path, *prior.of}
    before = {f.path for f in expired_data_files(snap, listing, prior.deletion_time - 1, everything)}
    after = {f.path for f in expired_data_files(snap, listing, prior.deletion_time, everything)}
    assert not before & ours and after >= ours


def test_a_compaction_that_keeps_base_files_still_gives_the_feed_a_whole_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Changes to the lowest keys only: the compaction rewrites the first BaseFile and keeps the others (as the
    planner chooses, docs/policies.md), its one unit covers the keys below the first kept one; its prior-rows
    file is complete all the same, and the feed reads no data file."""
    table = _create(tmp_path / "t", composite=False, buckets=1)
    rng = np.random.default_rng(6)
    table.write_changes(_batch(rng, 6000, 6000, False, deletes=0), "op")
    _compact(table, target_file_bytes=1500)
    start = table.version
    table.upsert(pa.table({"id": pa.array(rng.integers(0, 30, 8), pa.int64()), "v": rng.random(8)}))
    table.delete(pa.table({"id": pa.array([3, 29], pa.int64())}))
    end = table.version
    snap = table.snapshot()
    first = min((f for f in snap.files.values() if f.kind == "base"), key=lambda f: f.key_min or ())
    inputs = (first.path, *(p for p, f in snap.files.items() if f.kind == "delta"))
    task = PlanTaskDoc(task_id="compact-0", kind="compact", bucket=0, inputs=inputs, target_file_bytes=1500)
    plan = PlanDoc(table_uri=table.uri, read_version=snap.version, tasks=(task,))
    (result,) = run_plan(plan, table).results
    assert commit_rewrites(table, plan, [result]).committed
    (prior,) = result.priors
    assert prior.of == (first.path,) and prior.key_lo is None and prior.key_hi is not None  # keys below a kept one
    seen = feed_reads(monkeypatch)
    got = table.changes(start, end)
    assert seen == [] and _keyed(got).equals(_keyed(table.full_changes(start, end)))
