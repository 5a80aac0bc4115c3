"""Tables on named table features (docs/format.md, "Table features"): malformed protocol actions, tables created on
named features with each feature alone, refusal by name of features this maintd does not know, and the upgrade of
legacy tables (Python and CLI), then pinned, reclaimed, compacted with prior rows and evolved. The registry itself:
``log/test_features.py``."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import maintd.table.log.checkpoint as checkpoint_module
import maintd.table.log.commitfile as commitfile_module
from maintd import CorruptLogError, InvalidInputError, Table, UnsupportedProtocolError
from maintd.cli import app
from maintd.execution import PlanDoc, PlanTaskDoc, commit_rewrites, run_plan
from maintd.reclaim import reclaim_table
from maintd.table.log import features
from maintd.table.log.actions import EXPIRE_OPERATION, CommitInfo, Expire, Pin, Protocol, action_to_json
from maintd.table.log.tablelog import checkpoint_path, commit_path

SCHEMA = "id:int64!,v:string"
NAMES = (features.PINS, features.PRIOR_ROWS, features.LOOKED_UP_PRIOR_ROWS, features.ADDED_COLUMNS)


def named(*names: str, reader: tuple[str, ...] | None = None) -> Protocol:
    """Protocol 7 listing ``names`` (all of them reader features unless ``reader`` says otherwise)."""
    return Protocol(min_reader_version=7, min_writer_version=7, reader_features=tuple(names) if reader is None
                    else reader, writer_features=tuple(names))


def legacy(version: int) -> Protocol:
    return Protocol(min_reader_version=version, min_writer_version=version)


def _table(root: Path, features_: list[str] | None = None, **properties: Any) -> Table:
    return Table.create(str(root), SCHEMA, primary_key="id", buckets=1, properties=properties, features=features_)


def _rows(table: Table, version: int | None = None) -> list[dict[str, Any]]:
    return sorted(table.read(version=version).to_pylist(), key=lambda r: r["id"])


def _formats(table: Table) -> set[int]:
    """The header formats of every commit file of ``table``."""
    commits = [p.read_text() for p in (Path(table.uri) / "_log").glob("*.json") if p.name != "_last_checkpoint.json"]
    return {json.loads(text.splitlines()[0])["header"]["format"] for text in commits if text.startswith('{"header"')}


def _run(table: Table, kind: str) -> list[Any]:
    """Cluster every bucket's DeltaFiles, or compact every bucket, and commit; the tasks' results."""
    snap = table.snapshot()
    tasks = tuple(PlanTaskDoc(task_id=f"{kind}-{b}", kind=kind, partition=dict(part), bucket=b,
                              target_level=1 if kind == "cluster" else None,
                              inputs=tuple(sorted(f.path for f in files if kind == "compact" or f.kind == "delta")))
                  for (part, b), files in snap.by_bucket().items()
                  if sum(kind == "compact" or f.kind == "delta" for f in files) >= (2 if kind == "cluster" else 1))
    plan = PlanDoc(table_uri=table.uri, read_version=snap.version, tasks=tasks)
    results = run_plan(plan, table).results
    assert tasks and all(r.ok for r in results) and commit_rewrites(table, plan, results).committed
    return results


def _commit_protocol(table: Table, protocol: Protocol | dict[str, Any]) -> int:
    """Commit a protocol action written by hand, as a newer maintd would (in format 7, as a table on named
    features)."""
    version = table.log.latest_version() + 1  # the table may be refused already: no snapshot
    info = CommitInfo(operation="UPGRADE PROTOCOL", timestamp=2**41 + version, txn_id="newer")
    line = json.dumps({"protocol": protocol}) if isinstance(protocol, dict) else action_to_json(protocol)
    body = f"{action_to_json(info)}\n{line}\n".encode()
    header = {"header": {"format": 7, "version": version, "actions": 2, "sha256": hashlib.sha256(body).hexdigest()}}
    (Path(table.uri) / commit_path(version)).write_bytes(json.dumps(header).encode() + b"\n" + body)
    return version


@pytest.mark.parametrize("fields", [
    {"min_reader_version": 7, "min_writer_version": 7},  # no lists at 7
    {"min_reader_version": 7, "min_writer_version": 7, "reader_features": []},
    {"min_reader_version": 2, "min_writer_version": 2, "reader_features": [], "writer_features": []},
    {"min_reader_version": 7, "min_writer_version": 6, "reader_features": [], "writer_features": []},
    {"min_reader_version": 2, "min_writer_version": 7, "writer_features": []},
    {"min_reader_version": 7, "min_writer_version": 7, "reader_features": ["pins"], "writer_features": []},
    {"min_reader_version": 7, "min_writer_version": 7, "reader_features": [], "writer_features": ["a", "a"]},
    {"min_reader_version": 7, "min_writer_version": 7, "reader_features": [], "writer_features": [""]},
])
def test_a_malformed_protocol_is_refused(fields: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        Protocol.model_validate(fields)
    table = _table(tmp_path / "t")
    _commit_protocol(table, fields)
    with pytest.raises(CorruptLogError, match="line 3 is not a valid log action"):
        Table.open(table.uri).read()


def test_a_newer_writer_version_beside_named_reader_features_is_refused_by_its_number(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", ["pins"])
    table.upsert(pa.table({"id": [1], "v": ["a"]}))
    _commit_protocol(table, {"min_reader_version": 7, "min_writer_version": 8, "reader_features": ["pins"],
                             "writer_features": ["pins", "later"]})
    reopened = Table.open(table.uri)
    assert _rows(reopened) == [{"id": 1, "v": "a"}]
    with pytest.raises(UnsupportedProtocolError, match="requires writer protocol version 8; this maintd writes up to "
                                                       "version 7") as caught:
        reopened.upsert(pa.table({"id": [2], "v": ["b"]}))
    assert (caught.value.required, caught.value.supported, caught.value.features) == (8, 7, ())


# -- tables created on named features, each feature alone ---------------------------------------------------------


def test_a_new_table_is_created_at_protocol_2_unless_asked_for_named_features(tmp_path: Path) -> None:
    plain = _table(tmp_path / "plain")
    assert plain.snapshot().protocol == legacy(2)
    assert '{"protocol":{"min_reader_version":2,"min_writer_version":2}}' in (
        Path(plain.uri) / commit_path(0)).read_text()
    assert _table(tmp_path / "prior", **{"changes.prior.rows": "true"}).snapshot().protocol == legacy(4)
    none = _table(tmp_path / "none", [])
    assert none.snapshot().protocol == named() and _formats(none) == {7}
    with pytest.raises(InvalidInputError, match=r"unknown table feature pinz; the features this maintd knows are: "
                                                r"pins \(.*\); priorRows"):
        _table(tmp_path / "bad", ["pinz"])
    assert not (tmp_path / "bad").exists()


def test_a_pins_only_table_pins_without_a_protocol_change_and_reclamation_honours_the_pin(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", ["pins"], **{"log.checkpoint.interval": 2})
    assert table.snapshot().protocol == named("pins")
    table.upsert(pa.table({"id": [1, 2], "v": ["a", "b"]}))
    kept = _rows(table)
    table.overwrite(pa.table({"id": [3], "v": ["c"]}))
    pin = table.pin(1, timedelta(hours=3))
    assert table.snapshot().protocol == named("pins"), "the table has pins already: no protocol change"
    assert not any(isinstance(a, Protocol) for a in table.log.read_commit(table.version) or [])
    table.set_properties({"acid.data.retain.hours": 0})
    report = reclaim_table(Table.open(table.uri), now=datetime.now(UTC) + timedelta(hours=1))
    assert report.pinned_versions == (1,) and _rows(Table.open(table.uri), 1) == kept
    assert any(isinstance(a, Expire) for v in range(table.version + 1) for a in table.log.read_commit(v) or [])
    assert _formats(table) == {7}
    meta = pq.read_schema(Path(table.uri) / checkpoint_path(2)).metadata
    assert meta[b"format"] == b"7"
    assert Table.open(table.uri).pins()[0].id == pin.id


def test_a_looked_up_prior_rows_table_gets_prior_rows_but_not_pins(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", [], **{"changes.prior.rows": "lookup", "log.checkpoint.interval": 3})
    assert table.snapshot().protocol == named("lookedUpPriorRows", "priorRows")
    assert table.snapshot().stores_prior_rows and table.snapshot().looks_up_prior_rows
    table.upsert(pa.table({"id": list(range(20)), "v": ["a"] * 20}))
    _run(table, "compact")
    start = table.version
    for i in range(3):
        table.upsert(pa.table({"id": [i, 30 + i], "v": [f"b{i}", "n"]}))
    _run(table, "cluster")
    assert any(p.lookup for p in table.snapshot().priors.values())
    table.upsert(pa.table({"id": [5], "v": ["c"]}))
    _run(table, "compact")
    assert any(not p.lookup for p in table.snapshot().priors.values())
    feed = table.changes(start, table.version)
    full = table.full_changes(start, table.version)
    assert sorted(feed.to_pylist(), key=str) == sorted(full.to_pylist(), key=str)
    # no pins: reclamation's expire record goes into the commit parameters and the checkpoints' metadata
    table.set_properties({"acid.data.retain.hours": 0})
    reclaim_table(Table.open(table.uri), now=datetime.now(UTC) + timedelta(hours=1))
    table = Table.open(table.uri)
    assert table.snapshot().protocol == named("lookedUpPriorRows", "priorRows")
    expires = [v for v in range(table.version + 1)
               if any(isinstance(a, CommitInfo) and a.operation == EXPIRE_OPERATION for a in table.log.read_commit(v)
                      or [])]
    assert expires and not any(isinstance(a, Expire) for a in table.log.read_commit(expires[-1]) or [])
    assert table.snapshot().expired_before > 0
    with pytest.raises(InvalidInputError, match=r"lacks feature pins \(pinned versions"):
        txn = table.new_transaction("PIN")
        txn.pin(Pin(id="p", version=table.version, created=1, expires=2**50))
        txn.commit()


def test_a_table_on_named_features_gains_exactly_what_it_needs(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", [])
    table.upsert(pa.table({"id": [1], "v": ["a"]}))
    table.set_properties({"changes.prior.rows": "true"})
    assert table.snapshot().protocol == named("priorRows")
    table.pin(1, timedelta(hours=1))
    assert table.snapshot().protocol == named("pins", "priorRows")
    version = table.add_columns("note:string")
    assert table.snapshot().protocol == named("addedColumns", "pins", "priorRows")
    assert any(isinstance(a, Protocol) for a in table.log.read_commit(version) or [])
    table.upsert(pa.table({"id": [2], "v": ["b"], "note": ["x"]}))
    assert _rows(table) == [{"id": 1, "v": "a", "note": None}, {"id": 2, "v": "b", "note": "x"}]
    table.set_properties({"changes.prior.rows": "lookup"})
    assert table.snapshot().protocol == named(*sorted(NAMES))
    added = _table(tmp_path / "added", ["addedColumns"])
    added.add_columns("x:int64")
    assert added.snapshot().protocol == named("addedColumns") and _formats(added) == {7}


def test_maintd_without_named_features_refuses_such_a_table_by_its_format(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    table = _table(tmp_path / "t", ["pins"])
    monkeypatch.setattr(commitfile_module, "FORMAT", 6)
    monkeypatch.setattr(checkpoint_module, "FORMAT", 6)
    with pytest.raises(UnsupportedProtocolError, match="is in format 7; this maintd reads up to format 6"):
        Table.open(table.uri).read()


# -- refusal by name ----------------------------------------------------------------------------------------------


def test_a_reader_refuses_a_reader_feature_it_does_not_know_naming_it(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", ["pins"])
    table.upsert(pa.table({"id": [1], "v": ["a"]}))
    _commit_protocol(table, named("fancyReads", "pins"))
    with pytest.raises(UnsupportedProtocolError) as caught:
        Table.open(table.uri).read()
    assert str(caught.value) == (f"table {table.uri} uses feature fancyReads, which this maintd does not support; "
                                 "upgrade maintd to read this table")
    assert (caught.value.features, caught.value.required, caught.value.supported) == (("fancyReads",), 7, 7)
    assert table.log.load_snapshot(1).files, "the states before the change still load"
    (Path(table.uri) / commit_path(2)).unlink()  # the same change, naming two features this maintd does not know
    _commit_protocol(table, named("fancyReads", "pins", "zoom"))
    with pytest.raises(UnsupportedProtocolError, match=r"uses features fancyReads, zoom, which this maintd") as caught:
        Table.open(table.uri).snapshot()
    assert caught.value.features == ("fancyReads", "zoom")


def test_a_writer_refuses_a_writer_feature_it_does_not_know_and_a_reader_reads_on(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", ["pins"])
    table.upsert(pa.table({"id": [1], "v": ["a"]}))
    _commit_protocol(table, named("fancyWrites", "pins", reader=("pins",)))
    reopened = Table.open(table.uri)
    assert _rows(reopened) == [{"id": 1, "v": "a"}], "a writer-only feature does not stop a reader"
    said = (f"table {table.uri} uses feature fancyWrites, which this maintd does not support; upgrade maintd to "
            "write (or maintain) this table")
    with pytest.raises(UnsupportedProtocolError) as caught:
        reopened.upsert(pa.table({"id": [2], "v": ["b"]}))
    assert str(caught.value) == said and caught.value.features == ("fancyWrites",)
    on_disk = sorted(p.name for p in Path(table.uri).rglob("*.parquet"))
    with pytest.raises(UnsupportedProtocolError, match="uses feature fancyWrites"):
        reclaim_table(reopened, orphan_grace=timedelta(0), force_short_grace=True)
    with pytest.raises(UnsupportedProtocolError, match="uses feature fancyWrites"):
        reopened.pin(1, timedelta(hours=1))
    with pytest.raises(UnsupportedProtocolError, match="uses feature fancyWrites"):
        reopened.upgrade_protocol(["addedColumns"])
    assert sorted(p.name for p in Path(table.uri).rglob("*.parquet")) == on_disk and reopened.version == 2


# -- the upgrade --------------------------------------------------------------------------------------------------


def test_an_upgraded_table_keeps_its_features_and_is_then_pinned_reclaimed_compacted_and_evolved(
        tmp_path: Path) -> None:
    table = _table(tmp_path / "t", **{"log.checkpoint.interval": 3})
    table.upsert(pa.table({"id": [1, 2], "v": ["a", "b"]}))
    table.pin(1, timedelta(hours=1))
    assert table.snapshot().protocol == legacy(3)
    version = table.upgrade_protocol(["priorRows"])
    assert table.snapshot().protocol == named("pins", "priorRows")
    assert table.history(1)[0].parameters == {"reader_version": 7, "writer_version": 7,
                                             "features": ["pins", "priorRows"]}
    assert table.upgrade_protocol() == version and table.upgrade_protocol(["pins"]) == version, "idempotent"
    assert table.pins()[0].version == 1
    # prior rows: the property needs no protocol change any more
    table.set_properties({"changes.prior.rows": "true"})
    assert table.snapshot().protocol == named("pins", "priorRows")
    _run(table, "compact")
    start = table.version
    table.upsert(pa.table({"id": [2, 3], "v": ["B", "c"]}))
    _run(table, "compact")
    assert table.snapshot().priors
    assert sorted(table.changes(start, table.version).to_pylist(), key=str) == sorted(
        table.full_changes(start, table.version).to_pylist(), key=str)
    # reclaimed with the pin holding version 1
    table.set_properties({"acid.data.retain.hours": 0})
    report = reclaim_table(Table.open(table.uri), now=datetime.now(UTC) + timedelta(minutes=30))
    assert report.pinned_versions == (1,) and _rows(Table.open(table.uri), 1) == [{"id": 1, "v": "a"},
                                                                                  {"id": 2, "v": "b"}]
    # evolved: exactly addedColumns more
    table = Table.open(table.uri)
    table.add_columns("note:string")
    assert table.snapshot().protocol == named("addedColumns", "pins", "priorRows")
    _run(table, "compact")
    assert _rows(table) == [{"id": 1, "v": "a", "note": None}, {"id": 2, "v": "B", "note": None},
                            {"id": 3, "v": "c", "note": None}]
    assert 7 in _formats(table)


def test_an_upgrade_refuses_an_unknown_feature_naming_the_known_ones(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    with pytest.raises(InvalidInputError, match=r"unknown table features bogus, nope; the features this maintd knows "
                                                r"are: pins .*addedColumns \(columns added"):
        table.upgrade_protocol(["nope", "bogus", "pins"])
    assert table.version == 0 and table.snapshot().protocol == legacy(2)


def _cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def test_the_cli_upgrades_to_named_features_describes_them_and_refuses_an_unknown_name(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", **{"changes.prior.rows": "true"})
    bad = _cli("table", "upgrade-protocol", table.uri, "--feature", "pinz", "--yes")
    assert bad.exit_code == 2 and "unknown table feature pinz" in bad.output and "lookedUpPriorRows" in bad.output
    assert table.snapshot().protocol == legacy(4)
    done = _cli("table", "upgrade-protocol", table.uri, "--feature", "addedColumns", "--yes", "--json")
    assert done.exit_code == 0, done.output
    out = json.loads(done.output)
    assert out["changed"] is True and out["version"] == 1
    assert out["previous"] == {"reader": 4, "writer": 4, "features": ["pins", "priorRows"]}
    assert out["protocol"] == {"reader": 7, "writer": 7, "features": ["addedColumns", "pins", "priorRows"],
                               "reader_features": ["addedColumns", "pins", "priorRows"],
                               "writer_features": ["addedColumns", "pins", "priorRows"]}
    again = _cli("table", "upgrade-protocol", table.uri, "--feature", "pins", "--yes")
    assert again.exit_code == 0 and "already; nothing changed" in again.output and Table.open(table.uri).version == 1
    more = _cli("table", "upgrade-protocol", table.uri, "--feature", "lookedUpPriorRows", "--yes")
    assert more.exit_code == 0, more.output
    assert "to reader 7, writer 7 (named features: addedColumns, lookedUpPriorRows, pins, priorRows) at version 2" in (
        more.output)
    desc = _cli("table", "describe", table.uri)
    assert desc.exit_code == 0 and "protocol: reader 7, writer 7 (named features: addedColumns, lookedUpPriorRows, " \
                                   "pins, priorRows)" in desc.output
    as_json = json.loads(_cli("table", "describe", table.uri, "--json").output)
    assert as_json["protocol"]["reader_features"] == sorted(NAMES)
    refused = _cli("table", "upgrade-protocol", _table(tmp_path / "u").uri, "--feature", "pins")
    assert refused.exit_code == 2 and "pass --yes" in refused.output


def test_the_cli_creates_a_table_on_named_features(tmp_path: Path) -> None:
    made = _cli("table", "create", str(tmp_path / "t"), "--schema", SCHEMA, "--primary-key", "id", "--feature",
                "lookedUpPriorRows", "--json")
    assert made.exit_code == 0, made.output
    assert json.loads(made.output)["protocol"]["writer_features"] == ["lookedUpPriorRows", "priorRows"]
    bad = _cli("table", "create", str(tmp_path / "u"), "--schema", SCHEMA, "--primary-key", "id", "--feature", "x")
    assert bad.exit_code == 2 and "unknown table feature x" in bad.output
