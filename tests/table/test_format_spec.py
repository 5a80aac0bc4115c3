"""The spec and the code agree (docs/format.md): its test vectors and its list of actions, checked by calling the
real code.

* ``bucket-vectors-by-type``: the key hash and the bucket of keys of every key type, for several bucket counts;
* ``partition-text-vectors``: the text a real write puts in the commit file's ``partition`` and the directory of the
  file it writes, for every partition type (and the values it refuses);
* ``key-json-vectors``: the JSON a real write puts in ``key_min``/``key_max`` for every key type, and that these
  order as the values do;
* ``actions`` and ``commit-header``: every action and field the log writes, under the JSON name it is written with,
  is in the spec, and the spec names none the code lacks.

Each table is the one between the ``<name>:begin`` and ``<name>:end`` markers of docs/format.md.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import maintd
from maintd import Table
from maintd.table.files.bucketing import bucket_of, key_hash
from maintd.table.files.keys import sort_key
from maintd.table.files.schema import KEY_TYPES, TYPES
from maintd.table.log.actions import (
    ACTION_KEYS,
    AddFile,
    CommitInfo,
    Expire,
    Field_,
    Metadata,
    Pin,
    PriorRows,
    Protocol,
    RemoveFile,
    Txn,
    Unpin,
    action_to_json,
)
from maintd.table.log.commitfile import encode_commit
from maintd.table.log.tablelog import commit_path

DOC = Path(__file__).resolve().parents[2] / "docs" / "format.md"
EPOCH = dt.date(1970, 1, 1)


# -- reading the doc ------------------------------------------------------------------------------------------------


def doc_block(name: str) -> str:
    """The text between the ``name`` markers of docs/format.md."""
    text = DOC.read_text(encoding="utf-8")
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    assert begin in text and end in text, f"docs/format.md has no {name} table"
    return text.split(begin, 1)[1].split(end, 1)[0]


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def doc_table(name: str) -> tuple[list[str], list[list[str]]]:
    """The header and the rows of the table between the ``name`` markers, each cell without its code quotes."""
    lines = [ln for ln in doc_block(name).strip().splitlines() if ln.strip().startswith("|")]
    header = cells(lines[0])
    rows = [[unquote(c) for c in cells(ln)] for ln in lines[2:]]
    assert rows and all(len(r) == len(header) for r in rows), f"{name}: a row has the wrong number of cells"
    return header, rows


def unquote(cell: str) -> str:
    return cell[1:-1] if len(cell) >= 2 and cell.startswith("`") and cell.endswith("`") else cell


# -- values as the doc writes them (docs/format.md, "Buckets") ------------------------------------------------------


def parse_value(typ: str, text: str) -> Any:
    """A value of maintd type ``typ`` as the vectors write it (``null``: None; a date may be ``<n> days``)."""
    if text == "null":
        return None
    if typ == "bool":
        return {"true": True, "false": False}[text]
    if typ.startswith("int"):
        return int(text)
    if typ == "string":
        value = json.loads(text)
        assert isinstance(value, str), text
        return value
    if typ == "binary":
        assert text.startswith("0x"), text
        return bytes.fromhex(text[2:])
    if typ == "date":
        days = re.fullmatch(r"(-?\d+) days", text)
        return int(days[1]) if days else dt.date.fromisoformat(text)
    if typ in ("timestamp", "timestamp_tz"):
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        assert (value.tzinfo is not None) == (typ == "timestamp_tz"), text
        return value
    raise AssertionError(f"no key type {typ!r}")


def arrow_array(typ: str, values: list[Any]) -> pa.Array:
    """``values`` as an array of ``typ``'s Arrow type (dates given as a day number too)."""
    if typ == "date" and any(isinstance(v, int) for v in values):
        days = [v if isinstance(v, int) or v is None else (v - EPOCH).days for v in values]
        return pa.array(days, pa.int32()).view(pa.date32())
    return pa.array(values, TYPES[typ])


def split_values(text: str) -> list[str]:
    """The values of a composite key: comma-separated, strings as JSON literals (which may hold commas)."""
    return re.findall(r'"(?:[^"\\]|\\.)*"|[^,\s]+', text)


def committed_add(root: Path, version: int = 1) -> str:
    """The ``add`` line of commit ``version`` of the table at ``root``, as the commit file holds it."""
    lines = (root / commit_path(version)).read_text(encoding="utf-8").splitlines()
    (add,) = [ln for ln in lines if ln.startswith('{"add":')]
    return add


# -- buckets --------------------------------------------------------------------------------------------------------


def test_the_bucket_vectors_by_type_are_what_the_code_assigns() -> None:
    header, rows = doc_table("bucket-vectors-by-type")
    counts = [int(re.sub(r"\D", "", h)) for h in header[3:]]  # "bucket of 2", "of 7", ...
    for types, values, expected_hash, *buckets in rows:
        names = [t.strip() for t in types.split(",")]
        texts = split_values(values)
        assert len(names) == len(texts), f"{types}: {values}"
        columns = [arrow_array(t, [parse_value(t, v)]) for t, v in zip(names, texts, strict=True)]
        table = pa.table({f"c{i}": c for i, c in enumerate(columns)})
        assert f"{int(key_hash(table.columns)[0]):016x}" == expected_hash, f"the key hash of {types} {values}"
        got = [int(bucket_of(table, table.column_names, n)[0]) for n in counts]
        assert got == [int(b) for b in buckets], f"the buckets of {types} {values} (of {counts})"


def test_every_key_type_has_bucket_vectors() -> None:
    _, rows = doc_table("bucket-vectors-by-type")
    assert {r[0] for r in rows if "," not in r[0]} == KEY_TYPES


# -- partition values as text ---------------------------------------------------------------------------------------


def test_the_partition_text_vectors_are_what_a_write_commits(tmp_path: Path) -> None:
    _, rows = doc_table("partition-text-vectors")
    for i, (typ, value, text, directory) in enumerate(rows):
        root = tmp_path / f"p{i}"
        # the partition column outside the key: a key date must lie in years 1 to 9999, a partition value need not
        table = Table.create(str(root), f"id:int64!,p:{typ}", primary_key="id", partition_by="p", buckets=1)
        batch = pa.table({"id": pa.array([1], pa.int64()), "p": arrow_array(typ, [parse_value(typ, value)])})
        refused = re.fullmatch(r"refused: `(\w+)`", text)
        if refused:
            with pytest.raises(getattr(maintd, refused[1])):
                table.upsert(batch)
            assert table.version == 0, f"{typ} {value}: nothing may be committed"
            continue
        table.upsert(batch)
        written = re.search(r'"partition":\{"p":("(?:[^"\\]|\\.)*")\}', committed_add(root))
        assert written is not None and written[1] == text, f"the partition text of {typ} {value}"
        (f,) = table.snapshot().files.values()
        assert f.partition == {"p": json.loads(text)}
        assert f.path.split("/")[0] == directory, f"the directory of {typ} {value}"


def test_every_key_type_has_partition_text_vectors() -> None:
    _, rows = doc_table("partition-text-vectors")
    assert {r[0] for r in rows} == KEY_TYPES


# -- key values in the log ------------------------------------------------------------------------------------------


def test_the_key_json_vectors_are_what_a_write_commits(tmp_path: Path) -> None:
    _, rows = doc_table("key-json-vectors")
    for i, (typ, value, json_text) in enumerate(rows):
        root = tmp_path / f"k{i}"
        table = Table.create(str(root), f"k:{typ}!", primary_key="k", buckets=1)
        table.upsert(pa.table({"k": arrow_array(typ, [parse_value(typ, value)])}))
        add = committed_add(root)
        for bound in ("key_min", "key_max"):
            written = re.search(rf'"{bound}":\[(.*?)\],"', add)
            assert written is not None and written[1] == json_text, f"the {bound} of {typ} {value}"


def test_keys_in_the_log_order_as_their_values() -> None:
    _, rows = doc_table("key-json-vectors")
    by_type: dict[str, list[tuple[Any, Any]]] = defaultdict(list)
    for typ, value, json_text in rows:
        by_type[typ].append((parse_value(typ, value), sort_key((json.loads(json_text),))))
    assert set(by_type) == KEY_TYPES
    for typ, pairs in by_type.items():  # the doc lists each type's values in increasing order
        values = [v for v, _ in pairs]
        logged = [k for _, k in pairs]
        assert all(a < b for a, b in itertools.pairwise(values)), f"{typ}: the vectors are not in key order"
        assert all(a < b for a, b in itertools.pairwise(logged)), f"{typ}: the logged keys do not order as the values"


# -- actions --------------------------------------------------------------------------------------------------------

BASE = "ds=p/bucket-00000/base-" + "a" * 32 + ".parquet"
DELTA = "ds=p/bucket-00000/delta-L0-" + "b" * 32 + ".parquet"
PRIOR = "ds=p/bucket-00000/prior-" + "c" * 32 + ".parquet"
SAMPLES: dict[type[Any], Any] = {
    Protocol: Protocol(min_reader_version=7, min_writer_version=7, reader_features=("pins",),
                       writer_features=("pins",)),
    Metadata: Metadata(table_id="t", name="orders", fields=(Field_(name="id", type="int64", nullable=False),
                                                            Field_(name="note", type="string", added=True)),
                       primary_key=("id",), partition_by=("ds",), buckets=4, properties={"k": "v"}, created_time=1),
    AddFile: AddFile(path=BASE, partition={"ds": "p"}, bucket=0, kind="base", level=None, rows=2, bytes=10,
                     min_version=1, max_version=2, min_commit_time=1, max_commit_time=2, key_min=(1,), key_max=(2,),
                     data_change=False, modification_time=3),
    RemoveFile: RemoveFile(path=DELTA, deletion_time=3, data_change=False, partition={"ds": "p"}, bucket=0, bytes=5),
    CommitInfo: CommitInfo(operation="UPSERT", timestamp=3, txn_id="x", read_version=2, is_blind_append=True,
                           operation_parameters={"a": 1}, metrics={"rows": 2}),
    Txn: Txn(app_id="ingest", version=7, last_updated=3),
    Pin: Pin(id="p1", version=2, created=1, expires=2, reason="export", who="me@host"),
    Unpin: Unpin(id="p1", reason="released"),
    Expire: Expire(before=2, timestamp=1),
    PriorRows: PriorRows(path=PRIOR, of=(BASE,), deltas=(DELTA,), partition={"ds": "p"}, bucket=0, key_lo=(1,),
                         key_hi=(9,), unit=0, units=1, below=1, keys=2, rows=1, delta_rows=2, bytes=10,
                         deletion_time=3, lookup=True),
}
"""One action of each type with every field written (the fields written only when true set true)."""


def code_actions() -> dict[str, set[str]]:
    """Action key -> the JSON names of its fields as the log writes them (``list[].field`` for nested objects)."""
    out = {}
    for cls, key in ACTION_KEYS.items():
        assert cls in SAMPLES, f"action {key!r} ({cls.__name__}) has no sample here: add one"
        (written_key, body), = json.loads(action_to_json(SAMPLES[cls])).items()
        assert written_key == key
        assert len(body) == len(cls.model_fields), f"the sample of {key!r} leaves out a field"
        names = set(body)
        for name, value in body.items():
            if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                names |= {f"{name}[].{sub}" for v in value for sub in v}
        out[key] = names
    nested = json.loads(action_to_json(SAMPLES[Metadata]))["metadata"]["fields"]
    assert max(len(f) for f in nested) == len(Field_.model_fields), "the sample's columns leave out a field"
    return out


def doc_actions() -> dict[str, set[str]]:
    """Action key -> the field names its table in docs/format.md lists (``**`key`**`` heads each table)."""
    out: dict[str, set[str]] = {}
    current: str | None = None
    for line in doc_block("actions").splitlines():
        head = re.match(r"\*\*`(\w+)`\*\*", line)
        if head:
            current = head[1]
            assert current not in out, f"action {current!r} is described twice"
            out[current] = set()
        elif line.startswith("|") and current is not None:
            first = cells(line)[0]
            if first in ("field", "") or set(first) <= {"-"}:
                continue
            out[current] |= {unquote(n.strip()) for n in first.split(",")}
    return out


def test_the_spec_lists_every_action_and_field_the_log_writes() -> None:
    code, doc = code_actions(), doc_actions()
    assert sorted(doc) == sorted(code), "actions in the spec and in the code"
    for key in code:
        assert doc[key] == code[key], (f"fields of {key!r}: in the code only {sorted(code[key] - doc[key])}, "
                                       f"in the spec only {sorted(doc[key] - code[key])}")


def test_the_spec_lists_the_commit_header_fields() -> None:
    _, rows = doc_table("commit-header")
    header_line = encode_commit([SAMPLES[CommitInfo]], version=3, fmt=2).split(b"\n", 1)[0]
    (key, header), = json.loads(header_line).items()
    assert key == "header" and [r[0] for r in rows] == list(header)
