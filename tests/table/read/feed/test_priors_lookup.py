"""Looked-up prior rows (``changes.prior.rows=lookup``): what a clustering stores, how the feed reads it, its
lifetime in the log and on storage, and its commit's conflicts."""

from __future__ import annotations

import json
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

from maintd import InvalidInputError, Table
from maintd.execution import ExecutionOptions, PlanDoc, PlanTaskDoc, commit_rewrites, run_plan
from maintd.reclaim import reclaim_table
from maintd.table.files.schema import OP_COLUMN, OP_DELETE, VERSION_COLUMN
from maintd.table.log.actions import PriorRows, action_to_json
from maintd.table.log.checkpoint import decode_checkpoint, encode_checkpoint
from maintd.table.read.feed import GroupPriors

from ...table_helpers import feed_reads

LOOKUP = {"changes.prior.rows": "lookup"}


def _create(root: Path, *, buckets: int = 1, properties: dict[str, str] | None = None, partitioned: bool = False,
            composite: bool = False, text: bool = False) -> Table:
    schema = "a:int64!,b:string!,v:float64" if composite else "id:int64!,v:float64"
    return Table.create(str(root), schema + (",ds:string" if partitioned else "") + (",c:string" if text else ""),
                        primary_key=("a", "b") if composite else "id", buckets=buckets,
                        partition_by="ds" if partitioned else (),
                        properties=LOOKUP if properties is None else properties)


def _run(table: Table, kind: str, options: ExecutionOptions | None = None, *, read_version: int | None = None,
         commit: bool = True) -> tuple[PlanDoc, list[Any]]:
    """Cluster every bucket's DeltaFiles into one level-1 file, or compact every bucket; committed unless not."""
    snap = table.snapshot(read_version)
    tasks = []
    for (part, b), files in sorted(snap.by_bucket().items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        inputs = tuple(sorted(f.path for f in files if kind == "compact" or f.kind == "delta"))
        if len(inputs) >= (2 if kind == "cluster" else 1):
            tasks.append(PlanTaskDoc(task_id=f"{kind}-{dict(part)}-{b}", kind=kind, partition=dict(part), bucket=b,
                                     inputs=inputs, target_level=1 if kind == "cluster" else None))
    plan = PlanDoc(table_uri=table.uri, read_version=snap.version, tasks=tuple(tasks))
    if not tasks:
        return plan, []
    results = run_plan(plan, table, None, options or ExecutionOptions()).results
    assert all(r.ok for r in results), [r.error for r in results]
    if commit:
        assert commit_rewrites(table, plan, results).committed
    return plan, results


def _keyed(t: pa.Table) -> pa.Table:
    return t.sort_by([(c, "ascending") for c in t.column_names if not c.startswith("_") or c == "_change"])


def _ids(values: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(values, pa.int64())})


def _changed_table(root: Path, properties: dict[str, str] | None = None) -> tuple[Table, int, int, set[str]]:
    """A one-bucket table compacted into one BaseFile, then three commits of changes spread over its keys
    (not clustered yet): (table, start, end, the BaseFiles)."""
    table = _create(root, properties=properties)
    rng = np.random.default_rng(5)
    table.upsert(pa.table({"id": pa.array(np.arange(5000), pa.int64()), "v": rng.random(5000)}))
    _run(table, "compact")
    start = table.version
    for _ in range(2):
        keys = np.unique(rng.integers(0, 6000, 40))
        table.upsert(pa.table({"id": pa.array(keys, pa.int64()), "v": rng.random(len(keys))}))
    table.delete(_ids([1, 2, 3, 5999]))
    return table, start, table.version, set(table.snapshot().files) - {
        p for p, f in table.snapshot().files.items() if f.kind == "delta"}


# -- what a clustering stores ------------------------------------------------------------------------------------


def test_a_clustering_looks_up_the_base_rows_of_the_keys_it_merges_and_stores_them_with_its_rows(
        tmp_path: Path) -> None:
    table = _create(tmp_path / "t")
    assert table.snapshot().protocol.min_writer_version == 5  # a legacy table: looked-up prior rows are 5
    table.upsert(pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()), "v": [1.0, 2.0, 3.0, 4.0]}))
    _run(table, "compact")
    (base,) = table.snapshot().files
    v1 = table.upsert(pa.table({"id": pa.array([2, 9], pa.int64()), "v": [20.0, 90.0]}))
    v2 = table.delete(_ids([3, 11]))
    v3 = table.upsert(pa.table({"id": pa.array([2], pa.int64()), "v": [21.0]}))
    deltas = {p for p, f in table.snapshot().files.items() if f.kind == "delta"}
    _, (result,) = _run(table, "cluster")

    (prior,) = result.priors
    assert prior.lookup and prior.of == (base,) and set(prior.deltas) == deltas and prior.below == 1
    assert (prior.keys, prior.rows, prior.delta_rows, prior.key_lo, prior.key_hi) == (4, 2, 5, None, None)
    rows = pq.read_table(Path(table.uri) / prior.path).to_pylist()
    got = sorted(((r["id"], r["v"], r[OP_COLUMN], r[VERSION_COLUMN]) for r in rows), key=repr)
    assert got == sorted([(2, 2.0, 0, 1), (3, 3.0, 0, 1),  # the BaseFile's rows of the changed keys
                          (9, None, OP_DELETE, 0), (11, None, OP_DELETE, 0),  # none: markers
                          (2, 20.0, 0, v1), (9, 90.0, 0, v1), (3, None, OP_DELETE, v2), (11, None, OP_DELETE, v2),
                          (2, 21.0, 0, v3)], key=repr)  # every row the clustering merged
    snap = table.snapshot()
    stored = snap.priors[prior.path]
    assert stored.attached and stored.deletion_time == 0 and base in snap.files  # its BaseFile stays live
    assert prior.path in snap.referenced()


def test_only_lookup_tables_look_up_and_only_where_a_base_file_is(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    for name, props in (("plain", {}), ("compactions only", {"changes.prior.rows": "true"})):
        table = _create(tmp_path / name, properties=props)
        table.upsert(pa.table({"id": pa.array(np.arange(100), pa.int64()), "v": rng.random(100)}))
        _run(table, "compact")
        for _ in range(2):
            table.upsert(pa.table({"id": pa.array([5, 500], pa.int64()), "v": rng.random(2)}))
        _, results = _run(table, "cluster")
        assert not any(r.priors for r in results), name
    fresh = _create(tmp_path / "no base file")
    for _ in range(2):
        fresh.upsert(pa.table({"id": pa.array([5, 500], pa.int64()), "v": rng.random(2)}))
    _, results = _run(fresh, "cluster")
    assert not any(r.priors for r in results) and not fresh.snapshot().priors


def test_a_streamed_clustering_stores_what_an_in_memory_one_does(tmp_path: Path) -> None:
    results = {}
    for name, options in (("memory", ExecutionOptions()), ("stream", ExecutionOptions(task_memory_bytes=8_000))):
        table, *_ = _changed_table(tmp_path / name)
        _, (result,) = _run(table, "cluster", options)
        (prior,) = result.priors
        t = pq.read_table(Path(table.uri) / prior.path)
        results[name] = (result.mode, t.sort_by([("id", "ascending"), (VERSION_COLUMN, "ascending")]),
                         prior.model_copy(update={"path": "", "bytes": 0, "of": (), "deltas": ()}))
    assert results["stream"][0] != "memory" and results["memory"][0] == "memory"
    assert results["stream"][1].equals(results["memory"][1]) and results["stream"][2] == results["memory"][2]


# -- the feed ----------------------------------------------------------------------------------------------------


def test_after_a_clustering_the_feed_reads_its_prior_rows_and_no_data_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table, start, end, bases = _changed_table(tmp_path / "t")
    seen = feed_reads(monkeypatch)
    want = {(lo, hi): table.full_changes(lo, hi) for lo, hi in [(start, end), (start, start + 1), (start + 1, end)]}
    seen.clear()
    assert _keyed(table.changes(start, end)).equals(_keyed(want[start, end]))
    assert bases & set(seen)  # before: the BaseFile for the prior rows
    _run(table, "cluster")
    for (lo, hi), rows in want.items():
        seen.clear()
        assert _keyed(table.changes(lo, hi)).equals(_keyed(rows)), (lo, hi)
        assert seen == [], (lo, hi)  # the changed rows and the BaseFile's rows come from the one prior-rows file
    # past the clustering, keys it looked up (deleted above): the BaseFile still answered, the new file and the
    # clustering's level-1 file read
    table.upsert(pa.table({"id": pa.array([1, 2], pa.int64()), "v": [0.5, 0.5]}))
    seen.clear()
    latest = table.version
    assert _keyed(table.changes(start, latest)).equals(_keyed(table.full_changes(start, latest)))
    level1 = {p for p, f in table.snapshot().files.items() if f.kind == "delta" and f.level == 1}
    assert seen and not bases & set(seen) and level1 <= set(seen)
    # a key it did not look up: the BaseFile is read for that key
    table.upsert(pa.table({"id": pa.array([4321], pa.int64()), "v": [0.5]}))
    seen.clear()
    assert _keyed(table.changes(start, table.version)).equals(_keyed(table.full_changes(start, table.version)))
    assert bases <= set(seen)


def test_after_the_compaction_that_follows_the_feed_still_reads_the_looked_up_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compaction folds the level-1 file, not the changed level-0 files: its own prior-rows file is no whole
    record of the range, but the clustering's still holds every row the range needs."""
    table, start, end, _bases = _changed_table(tmp_path / "t")
    want = table.full_changes(start, end)
    _run(table, "cluster")
    _run(table, "compact")
    seen = feed_reads(monkeypatch)
    assert _keyed(table.changes(start, end)).equals(_keyed(want)) and seen == []
    snap = table.snapshot()
    looked_up = [p for p in snap.priors.values() if p.lookup]
    assert looked_up and all(p.deletion_time == snap.timestamp and not p.attached for p in looked_up)


def test_two_clusterings_of_the_same_rows_are_read_once(tmp_path: Path) -> None:
    """A second clustering merges the first one's level-1 file with new level-0 files: both prior-rows files
    hold the first commits' rows, which the feed counts once."""
    table, start, _end, _bases = _changed_table(tmp_path / "t")
    _run(table, "cluster")
    table.upsert(pa.table({"id": pa.array([2, 4, 7000], pa.int64()), "v": [0.1, 0.2, 0.3]}))
    table.upsert(pa.table({"id": pa.array([4, 7001], pa.int64()), "v": [0.4, 0.5]}))
    _run(table, "cluster")
    end = table.version
    assert len([p for p in table.snapshot().priors.values() if p.lookup]) == 2
    for lo in range(start, end):
        for hi in range(lo + 1, end + 1):
            assert _keyed(table.changes(lo, hi)).equals(_keyed(table.full_changes(lo, hi))), (lo, hi)


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.booleans(), st.booleans(), st.integers(1, 4))
def test_the_feed_with_looked_up_prior_rows_equals_the_full_diff_between_any_two_versions(
        seed: int, composite: bool, partitioned: bool, rounds: int) -> None:
    """Random histories of writes, clusterings (which look up) and compactions; every (start, end] is compared
    with the full diff, and how the feed read each group is counted."""
    rng = np.random.default_rng(seed)
    ways: list[str] = []
    changed_rows, answered = GroupPriors.changed_rows, GroupPriors.answered

    def counted(self: GroupPriors, *args: Any) -> Any:
        found = changed_rows(self, *args)
        ways.append("changed rows from prior-rows files" if found is not None else "changed files read")
        return found

    def counted_answers(self: GroupPriors, *args: Any) -> Any:
        found = answered(self, *args)
        ways.append("every row from prior-rows files" if found is not None else "some data files read")
        return found

    def batch(n: int, keyspace: int, deletes: float = 0.2) -> pa.Table:
        k = rng.integers(0, keyspace, n)
        cols: dict[str, Any] = ({"a": pa.array(k % 3, pa.int64()), "b": [f"k{x:06d}" for x in k]} if composite
                                else {"id": pa.array(k, pa.int64())})
        if partitioned:
            cols["ds"] = pa.array(np.where(k % 2 == 0, "even", "odd"))
        # a text column of few values: dictionary-encoded in every file, merged and looked up as a dictionary
        cols["c"] = pa.array([(None, "x", "y")[i] for i in rng.integers(0, 3, n)], pa.string())
        return pa.table({**cols, "v": rng.random(n), "op": pa.array((rng.random(n) < deletes).astype(np.int8))})

    threads = ExecutionOptions(in_process_workers="threads")
    with (tempfile.TemporaryDirectory() as tmp, patch.object(GroupPriors, "changed_rows", counted),
          patch.object(GroupPriors, "answered", counted_answers)):
        table = _create(Path(tmp) / "t", buckets=2, partitioned=partitioned, composite=composite, text=True)
        table.write_changes(batch(600, 800, deletes=0), "op")
        if rng.random() < 0.8:
            _run(table, "compact", threads)
        for _ in range(rounds):
            for _ in range(int(rng.integers(1, 4))):
                table.write_changes(batch(int(rng.integers(5, 60)), 900), "op")
            step = str(rng.choice(["cluster", "cluster", "compact", "cluster then compact", "nothing"]))
            for kind in step.split(" then ") if step != "nothing" else []:
                _run(table, kind, threads)
            event(f"maintenance: {step}")
        end = table.version
        for start in sorted({0, *rng.integers(0, end, 5).tolist()}):
            for stop in sorted({end, *rng.integers(start, end + 1, 3).tolist()}):
                got, want = table.changes(start, stop), table.full_changes(start, stop)
                assert _keyed(got).equals(_keyed(want)), (start, stop)
    for way in sorted(set(ways)):
        event(way)


# -- lifetime ----------------------------------------------------------------------------------------------------


def test_a_looked_up_file_gets_its_deletion_time_from_the_commit_that_removes_its_base_files(tmp_path: Path) -> None:
    table, *_ = _changed_table(tmp_path / "t")
    table.set_properties({"log.checkpoint.interval": 2})
    _run(table, "cluster")
    snap = table.snapshot()
    (prior,) = snap.priors.values()
    data = encode_checkpoint(snap)  # in a checkpoint while its BaseFiles live: no deletion time yet
    assert pq.ParquetFile(__import__("io").BytesIO(data)).schema_arrow.metadata[b"format"] == b"5"
    back = decode_checkpoint(data, uri=table.uri, path="cp", version=snap.version).build()
    assert back.priors[prior.path].attached
    _run(table, "compact")
    latest = Table.open(table.uri).snapshot()  # replayed from the checkpoint above, or from commit 0
    moved = latest.priors[prior.path]
    assert not moved.attached and moved.deletion_time == latest.timestamp
    assert {p.deletion_time for p in latest.priors.values()} == {latest.timestamp}
    for v in range(table.version + 1):  # every replay of the history agrees
        s = table.snapshot(v)
        if prior.path in s.priors:
            assert s.priors[prior.path].attached == (v < table.version)
    table.log.advance_reclaimed_watermark(snap.version, snap.timestamp)  # any watermark: an attached file stays
    assert table.log.prune_tombstones(snap).priors == snap.priors


def test_reclamation_keeps_a_looked_up_file_while_its_base_files_live_and_deletes_it_with_them(
        tmp_path: Path) -> None:
    table, _start, _end, bases = _changed_table(tmp_path / "t")
    table.set_properties({"acid.data.retain.hours": 1})
    _run(table, "cluster")
    (prior,) = table.snapshot().priors
    root = Path(table.uri)
    now = datetime.now(UTC)
    # long after: every version but the latest expires, the level-0 files go, the BaseFile and the file stay
    report = reclaim_table(table, now=now + timedelta(hours=3), orphan_grace=timedelta(0), force_short_grace=True)
    assert report.data_files_deleted >= 1 and report.orphan_files_deleted == 0
    assert (root / prior).exists() and all((root / b).exists() for b in bases)
    _run(table, "compact")
    compacted = datetime.fromtimestamp(table.snapshot().timestamp / 1000, UTC)
    reclaim_table(table, now=compacted + timedelta(minutes=30))  # the version before the compaction is retained
    assert (root / prior).exists() and all((root / b).exists() for b in bases)
    reclaim_table(table, now=compacted + timedelta(hours=2))
    assert not (root / prior).exists() and not any((root / b).exists() for b in bases)
    assert not Table.open(table.uri).log.prune_tombstones(Table.open(table.uri).snapshot()).priors


# -- commits -----------------------------------------------------------------------------------------------------


def test_a_clustering_whose_base_files_were_compacted_meanwhile_commits_without_its_lookup(tmp_path: Path) -> None:
    """The compaction here rewrites the BaseFile alone (a DeltaFile it does not take stays): the clustering's
    inputs are untouched, but its prior-rows file would answer for a removed BaseFile. It lands without it, and
    the file is deleted."""
    table, start, end, bases = _changed_table(tmp_path / "t")
    read = table.version
    plan, results = _run(table, "cluster", commit=False)
    (prior,) = results[0].priors
    snap = table.snapshot()
    base = next(iter(bases))
    rewrite = PlanDoc(table_uri=table.uri, read_version=snap.version, tasks=(PlanTaskDoc(
        task_id="compact-base", kind="compact", partition={}, bucket=0, inputs=(base,)),))
    done = run_plan(rewrite, table, None, ExecutionOptions()).results
    assert commit_rewrites(table, rewrite, done).committed
    outcome = commit_rewrites(table, plan, results)
    assert outcome.committed and outcome.conflicts == 1 and outcome.conflict_types == ["ConcurrentDeleteDeleteError"]
    latest = table.snapshot()
    assert prior.path not in latest.priors and not (Path(table.uri) / prior.path).exists()
    assert results[0].adds[0].path in latest.files and read < latest.version
    assert _keyed(table.changes(start, end)).equals(_keyed(table.full_changes(start, end)))


def test_a_transaction_refuses_a_looked_up_file_below_protocol_5_or_for_base_files_not_live_or_removed(
        tmp_path: Path) -> None:
    table, *_ = _changed_table(tmp_path / "t", properties={"changes.prior.rows": "true"})
    assert table.snapshot().protocol.min_writer_version == 4
    snap = table.snapshot()
    base = next(p for p, f in snap.files.items() if f.kind == "base")
    delta = next(p for p, f in snap.files.items() if f.kind == "delta")
    prior = PriorRows(path="bucket-00000/prior-x.parquet", of=(base,), deltas=(delta,), bucket=0, below=1, keys=1,
                      rows=1, delta_rows=1, bytes=1, lookup=True)
    txn = table.new_transaction("CLUSTER")
    with pytest.raises(InvalidInputError,
                       match=r"reader 4, writer 4.* lacks feature lookedUpPriorRows .*changes\.prior\.rows to lookup"):
        txn.add_prior(prior)
    table.set_properties(LOOKUP)
    assert table.snapshot().protocol.min_writer_version == 5
    for of, remove, said in ((("bucket-00000/base-gone.parquet",), False, "does not hold"), ((base,), True,
                                                                                             "this commit removes")):
        txn = table.new_transaction("CLUSTER")
        if remove:
            txn.remove(base, data_change=False)
        txn.add_prior(prior.model_copy(update={"of": of}))
        with pytest.raises(InvalidInputError, match=said):
            txn.commit()


def test_the_lookup_field_is_written_only_when_set(tmp_path: Path) -> None:
    """A compaction's file reads as protocol 4 wrote it (its readers know no ``lookup``)."""
    plain = PriorRows(path="p.parquet", of=("b.parquet",), deltas=("d.parquet",), bucket=0, below=0, keys=1, rows=1,
                      delta_rows=0, bytes=1)
    assert "lookup" not in json.loads(action_to_json(plain))["prior"]
    assert json.loads(action_to_json(plain.model_copy(update={"lookup": True})))["prior"]["lookup"] is True


def test_a_lookup_in_large_row_groups_reads_them_one_at_a_time_and_finds_the_same_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Row groups larger than the limit are read one at a time (a unit holds one decoded row group); what is
    found is the same."""
    import maintd.table.files.datafiles as files

    found = {}
    for name, limit in (("at once", files._KEYED_READ_BYTES), ("one at a time", 0)):
        monkeypatch.setattr(files, "_KEYED_READ_BYTES", limit)
        calls: list[int] = []
        one = pq.ParquetFile.read_row_group

        def counted(self: pq.ParquetFile, i: int, *args: Any, _one: Any = one, _calls: list[int] = calls,
                    **kwargs: Any) -> pa.Table:
            _calls.append(i)
            return _one(self, i, *args, **kwargs)

        monkeypatch.setattr(pq.ParquetFile, "read_row_group", counted)
        table = _create(tmp_path / name)
        rng = np.random.default_rng(9)
        table.upsert(pa.table({"id": pa.array(np.arange(5000), pa.int64()), "v": rng.random(5000)}))
        _run(table, "compact", ExecutionOptions(task_memory_bytes=4 << 20, in_process_workers="threads"))
        (base,) = table.snapshot().files
        assert pq.ParquetFile(Path(table.uri) / base).metadata.num_row_groups >= 2
        for _ in range(2):
            table.upsert(pa.table({"id": pa.array([10, 2500, 4990, 7000], pa.int64()), "v": rng.random(4)}))
        _, (result,) = _run(table, "cluster", ExecutionOptions(in_process_workers="threads"))
        (prior,) = result.priors
        found[name] = (pq.read_table(Path(table.uri) / prior.path).sort_by(
            [("id", "ascending"), (VERSION_COLUMN, "ascending")]).drop_columns([VERSION_COLUMN]), len(calls))
    assert found["at once"][0].equals(found["one at a time"][0])
    assert found["at once"][1] == 0 and found["one at a time"][1] >= 2


def test_a_clustering_that_looks_up_counts_its_bucket_s_base_files_toward_the_in_process_limit(tmp_path: Path) -> None:
    """It may read them: a plan small in its inputs but not in its BaseFiles goes to Spark."""
    from maintd.execution.driver import runs_in_process

    for props, counted in ((LOOKUP, True), ({"changes.prior.rows": "true"}, False)):
        table, *_ = _changed_table(tmp_path / props["changes.prior.rows"], properties=props)
        snap = table.snapshot()
        deltas = sum(f.bytes for f in snap.files.values() if f.kind == "delta")
        bases = sum(f.bytes for f in snap.files.values() if f.kind == "base")
        plan = PlanDoc(table_uri=table.uri, read_version=snap.version, tasks=(PlanTaskDoc(
            task_id="c", kind="cluster", partition={}, bucket=0, target_level=1,
            inputs=tuple(p for p, f in snap.files.items() if f.kind == "delta")),))
        assert runs_in_process(plan, snap, ExecutionOptions(in_process_max_bytes=deltas + bases))
        assert runs_in_process(plan, snap, ExecutionOptions(in_process_max_bytes=deltas)) is not counted
