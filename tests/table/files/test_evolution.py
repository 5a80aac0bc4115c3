"""Schema evolution (docs/format.md, "Schema evolution"): adding nullable columns, reading files written before
them as nulls on every read path, writers with and without the new columns, ``merge_schema``, the refusals, the
protocol step and concurrent writers."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pyarrow as pa
import pytest

import maintd.table.log.checkpoint as checkpoint_module
import maintd.table.log.commitfile as commitfile_module
import maintd.table.log.features as features_module
from maintd import MetadataChangedError, SchemaEvolutionError, SchemaMismatchError, Table, UnsupportedProtocolError
from maintd.table.files.evolution import add_columns, parse_columns_spec
from maintd.table.log.actions import Field_

SCHEMA = "id:int64!,region:string!,name:string"


def _table(root: Path, **props: str) -> Table:
    t = Table.create(str(root / "t"), SCHEMA, primary_key=["region", "id"], partition_by="region", buckets=2,
                     properties=props or None)
    t.upsert(pa.table({"id": [1, 2, 3], "region": ["eu", "us", "eu"], "name": ["a", "b", "c"]}))
    return t


def _rows(t: pa.Table) -> list[dict[str, object]]:
    return sorted(t.to_pylist(), key=lambda r: (r["region"], r["id"]))


def test_added_columns_read_as_nulls_and_older_versions_keep_their_schema(tmp_path: Path) -> None:
    t = _table(tmp_path)
    v = t.add_columns("score:float64,note:string")
    t.upsert(pa.table({"id": [4], "region": ["us"], "name": ["d"], "score": [1.5]}))
    assert t.read(version=1).column_names == ["id", "region", "name"]
    assert t.schema(1).names == ["id", "region", "name"]
    assert t.schema().field("score").nullable and t.schema().names[-2:] == ["score", "note"]
    assert _rows(t.read(version=v)) == [
        {"id": 1, "region": "eu", "name": "a", "score": None, "note": None},
        {"id": 3, "region": "eu", "name": "c", "score": None, "note": None},
        {"id": 2, "region": "us", "name": "b", "score": None, "note": None}]
    latest = _rows(t.read())
    assert latest[-1] == {"id": 4, "region": "us", "name": "d", "score": 1.5, "note": None}
    # every reader of the format: the scan (with a filter, columns, key ranges), batches, pyarrow datasets
    assert _rows(t.scan(filter="region = 'eu' and id >= 1", columns=["id", "region", "score"]).to_table()) == [
        {"id": 1, "region": "eu", "score": None}, {"id": 3, "region": "eu", "score": None}]
    assert _rows(t.to_pyarrow_dataset().to_table()) == latest
    assert sum(b.num_rows for b in t.to_batches(columns=["note"])) == 4
    record = t.history(2)[-1]
    assert record.operation == "ADD COLUMNS" and record.parameters == {"columns": ["score:float64", "note:string"]}


def test_the_change_feed_across_the_change_shows_the_new_columns(tmp_path: Path) -> None:
    t = _table(tmp_path)
    t.add_columns("score:float64")
    t.upsert(pa.table({"id": [1], "region": ["eu"], "name": ["a2"], "score": [2.0]}))
    t.delete(pa.table({"id": [2], "region": ["us"]}))
    feed = {(r["id"], r["_change"]): r for r in t.changes(1).to_pylist()}
    assert feed.keys() == {(1, "update"), (2, "delete")}
    assert feed[1, "update"]["score"] == 2.0 and feed[2, "delete"]["score"] is None
    assert t.changes(0).column_names[:4] == ["id", "region", "name", "score"]


def test_the_full_diff_feed_across_the_change_fills_the_new_columns_at_the_older_version(tmp_path: Path) -> None:
    # the feed falls back to diffing two full reads (a removed file of unknown origin): the older state has no
    # score column and must read it as nulls, as the incremental feed does
    t = _table(tmp_path)
    t.add_columns("score:float64")
    t.upsert(pa.table({"id": [1], "region": ["eu"], "name": ["a2"], "score": [2.0]}))
    t.delete(pa.table({"id": [2], "region": ["us"]}))
    full = {(r["id"], r["_change"]): r for r in t.full_changes(1).to_pylist()}
    assert full == {(r["id"], r["_change"]): r for r in t.changes(1).to_pylist()}
    assert full.keys() == {(1, "update"), (2, "delete")} and full[1, "update"]["score"] == 2.0
    assert t.full_changes(0).column_names == t.changes(0).column_names


def test_writers_may_leave_added_columns_out_but_not_the_original_ones(tmp_path: Path) -> None:
    t = _table(tmp_path)
    t.add_columns("score:float64")
    t.upsert(pa.table({"id": [5], "region": ["eu"], "name": ["e"]}))  # a writer that does not know score
    t.write_changes(pa.table({"id": [6], "region": ["eu"], "name": ["f"], "op": pa.array([0], pa.int8())}), "op")
    assert {r["id"]: r["score"] for r in t.read().to_pylist()}[6] is None
    with pytest.raises(SchemaMismatchError, match=r"column 'name' .* is missing"):
        t.upsert(pa.table({"id": [7], "region": ["eu"], "score": [1.0]}))


def test_merge_schema_adds_the_extra_columns_in_the_writes_own_commit(tmp_path: Path) -> None:
    t = _table(tmp_path)
    extra = pa.table({"id": [7], "region": ["eu"], "name": ["g"], "colour": ["red"]})
    with pytest.raises(SchemaMismatchError, match=r"colour are not in the table schema.*merge_schema=True"):
        t.upsert(extra)
    before = t.version
    v = t.upsert(extra, merge_schema=True)
    assert v == before + 1 and t.history(1)[0].operation == "UPSERT"
    assert t.schema().names == ["id", "region", "name", "colour"] and t.snapshot().protocol.min_writer_version == 6
    assert {r["id"]: r["colour"] for r in t.read().to_pylist()} == {1: None, 2: None, 3: None, 7: "red"}
    t.upsert(extra, merge_schema=True)  # nothing new to add: a plain write
    assert t.schema().names == ["id", "region", "name", "colour"]
    v = t.overwrite(pa.table({"id": [8], "region": ["us"], "name": ["h"], "size": pa.array([3], pa.int16())}),
                    partition={"region": "us"}, merge_schema=True)
    assert t.schema().field("size").type == pa.int16() and t.read(version=v).num_rows == 4


@pytest.mark.parametrize(("spec", "message"), [
    ("name:string", r"column 'name' exists already \(with the same type\)"),
    ("name:int64", r"column 'name' exists already \(with type string, not int64\).*widening too"),
    ("id:int64", "is a key or partition column"),
    ("region:string", "is a key or partition column"),
    ("score:float64!", "cannot be added NOT NULL"),
    ("score:decimal", "unknown column type 'decimal'"),
    ("score", "must be name:type"),
    ("_maintd_x:int32", "reserved"),
    ("a:int32,a:int64", "duplicate column names"),
    (" , ", "no column to add"),
])
def test_changes_other_than_adding_nullable_value_columns_are_refused(tmp_path: Path, spec: str,
                                                                      message: str) -> None:
    t = _table(tmp_path)
    before = t.version
    with pytest.raises(SchemaEvolutionError, match=message):
        t.add_columns(spec)
    assert t.version == before and t.snapshot().protocol.min_reader_version == 2


def test_arrow_fields_are_added_nullable_only(tmp_path: Path) -> None:
    t = _table(tmp_path)
    with pytest.raises(SchemaEvolutionError, match="cannot be added NOT NULL"):
        t.add_columns(pa.field("n", pa.int32(), nullable=False))
    with pytest.raises(SchemaEvolutionError, match="not supported"):
        t.add_columns([pa.field("d", pa.decimal128(10, 2))])
    t.add_columns(pa.schema([pa.field("n", pa.int32()), pa.field("when", pa.timestamp("us", tz="UTC"))]))
    assert [(f.name, f.type, f.added) for f in t.metadata.fields][-2:] == [("n", "int32", True),
                                                                            ("when", "timestamp_tz", True)]


def test_the_added_flag_is_written_only_for_added_columns() -> None:
    assert json.loads(Field_(name="a", type="int64").model_dump_json()) == {"name": "a", "type": "int64",
                                                                           "nullable": True}
    assert json.loads(Field_(name="a", type="int64", added=True).model_dump_json())["added"] is True
    assert [f.added for f in parse_columns_spec("a:int,b:date", table="t")] == [False, False]


def test_only_the_first_change_raises_the_protocol_and_tables_that_never_evolve_keep_theirs(tmp_path: Path) -> None:
    plain = _table(tmp_path / "plain")
    plain.upsert(pa.table({"id": [9], "region": ["eu"], "name": ["x"]}))
    assert plain.snapshot().protocol.min_reader_version == 2
    assert '"added"' not in "".join(p.read_text() for p in (Path(plain.uri) / "_log").glob("*.json"))
    t = _table(tmp_path / "evolved", **{"changes.prior.rows": "lookup"})
    assert t.snapshot().protocol.min_reader_version == 5
    v = t.add_columns("a:int32")
    assert t.snapshot().protocol.min_reader_version == 6
    assert [h.operation for h in t.history(1)] == ["ADD COLUMNS"] and v == t.version
    t.add_columns("b:int32")
    log = (Path(t.uri) / "_log" / f"{18446744073709551615 - t.version:020d}.json").read_text()
    assert '"protocol"' not in log and '"format":6' in log


def test_an_older_maintd_refuses_an_evolved_table_by_its_protocol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    t = _table(tmp_path, **{"log.checkpoint.interval": "2"})
    t.add_columns("a:int32")  # version 2: a checkpoint of format 6 too
    monkeypatch.setattr(commitfile_module, "FORMAT", 5)
    monkeypatch.setattr(checkpoint_module, "FORMAT", 5)
    monkeypatch.setattr(features_module, "READER_VERSION", 5)
    with pytest.raises(UnsupportedProtocolError, match="upgrade maintd") as caught:
        Table.open(t.uri).read()
    assert caught.value.required == 6
    monkeypatch.setattr(commitfile_module, "FORMAT", 6)
    monkeypatch.setattr(checkpoint_module, "FORMAT", 6)
    with pytest.raises(UnsupportedProtocolError, match=r"requires reader protocol version 6"):
        Table.open(t.uri).read()


def test_a_blind_write_prepared_on_the_old_schema_lands_over_a_concurrent_addition(tmp_path: Path) -> None:
    t = _table(tmp_path)
    t.add_columns("a:int32")  # the table is at protocol 6 already: the next addition changes no protocol
    writer = Table.open(t.uri)
    snap = writer.snapshot()
    txn = writer.new_transaction("UPSERT", read_snapshot=snap)
    from maintd.table.files.writer import prepare_changes, split_and_write

    batch = prepare_changes(pa.table({"id": [10], "region": ["eu"], "name": ["old"], "a": [1]}), None,
                            snap.metadata, table=t.uri)
    for f in split_and_write(writer.storage, snap.metadata, batch):
        txn.add(f)
    Table.open(t.uri).add_columns("b:string")  # lands first
    v = txn.commit()
    got = {r["id"]: r for r in Table.open(t.uri).read(version=v).to_pylist()}
    assert got[10] == {"id": 10, "region": "eu", "name": "old", "a": 1, "b": None}


@pytest.mark.parametrize("loser", ["properties", "maintenance"])
def test_other_transactions_still_conflict_with_an_addition(tmp_path: Path, loser: str) -> None:
    t = _table(tmp_path)
    t.add_columns("a:int32")
    other = Table.open(t.uri)
    snap = other.snapshot()
    txn = other.new_transaction("SET PROPERTIES" if loser == "properties" else "OPTIMIZE", read_snapshot=snap)
    if loser == "properties":
        txn.set_metadata(snap.metadata.model_copy(update={"properties": {"acid.data.retain.hours": "5"}}))
    else:
        txn.remove(next(iter(snap.files.values())), data_change=False)
    Table.open(t.uri).add_columns("b:string")
    with pytest.raises(MetadataChangedError, match="ADD COLUMNS"):
        txn.commit()


def _add_in_process(uri: str, name: str, ready: multiprocessing.synchronize.Event) -> None:
    ready.wait(30)
    Table.open(uri).add_columns(f"{name}:int64")


def test_writer_processes_and_a_schema_change_in_another_process_lose_no_row(tmp_path: Path) -> None:
    t = _table(tmp_path)
    t.add_columns("a:int32")
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=_add_in_process, args=(t.uri, "late", ready))
    proc.start()
    writer = Table.open(t.uri)
    for i in range(30):
        if i == 5:
            ready.set()
        writer.upsert(pa.table({"id": [100 + i], "region": ["us"], "name": [f"w{i}"]}))
    proc.join(60)
    assert proc.exitcode == 0
    final = Table.open(t.uri)
    assert final.schema().names[-2:] == ["a", "late"]
    ids = {r["id"] for r in final.read().to_pylist()}
    assert set(range(100, 130)) <= ids


def test_add_columns_is_pure_over_metadata(tmp_path: Path) -> None:
    md = _table(tmp_path).metadata
    new = add_columns(md, parse_columns_spec("x:date", table="t"), table="t")
    assert md.column_names == ("id", "region", "name") and new.column_names == ("id", "region", "name", "x")
    assert new.fields[-1].added and new.fields[-1].nullable
