"""The bytes of one checkpoint: the full state at a version, self-verifying, with transaction records.

A checkpoint is a Parquet file (zstd) with one string column ``action``: one JSON log line per action of
the state. Those are the protocol, metadata, one ``add`` per live file, one ``remove`` per tombstone, one ``txn``
per application, one ``pin`` per pin and one ``prior`` per prior-rows file. In tables with feature ``pins`` it also
holds the latest ``expire`` record, so that pins survive the expiry of the commits that made them. Its
key-value metadata holds (docs/format.md, "Snapshots and checkpoints"):

* ``version``, ``timestamp``: the version it holds and that version's commit time.
* ``format`` (2, the protocol in legacy tables of protocol 3 to 6, 7 in tables on named features), ``actions``
  (the row count) and ``sha256`` (of the rows joined by ``\\n``): a damaged or cut checkpoint fails the check and
  loading falls back to an older one (:mod:`maintd.table.log.tablelog`).
* ``txns``: ``{"from": v0, "records": [[txn_id, commit_time], ...]}``, the transaction id of every version
  from ``v0`` to ``version``. This is what answers "did my commit land at v?" once commit ``v`` is gone or
  was replaced: a checkpoint recording another transaction at ``v`` proves that a commit published there
  (into history reclamation had already removed) is not part of the table.

Checkpoints written before format 2 have none of these keys and are read as they are, without records.
"""

from __future__ import annotations

import hashlib
import io
import json

import pyarrow as pa
import pyarrow.parquet as pq

from maintd.table.log import features
from maintd.table.log.actions import Expire, RemoveFile, Txn, action_to_json
from maintd.table.log.commitfile import Where, decode_lines
from maintd.table.log.snapshot import Snapshot, SnapshotBuilder

FORMAT = 7
"""The newest checkpoint format (:func:`maintd.table.log.features.checkpoint_format`): 3 to 6 for legacy tables of
those protocols (3: pins and expire records, which older readers refuse by the number; 4: also prior-rows files; 5:
looked-up ones too; 6: columns added to the schema), 7 for tables on named features, 2 for the others."""


def encode_checkpoint(snapshot: Snapshot) -> bytes:
    """The checkpoint file of ``snapshot`` (its tombstones as they are: prune them first)."""
    lines = [action_to_json(snapshot.protocol), action_to_json(snapshot.metadata)]
    lines += [action_to_json(f) for f in snapshot.files.values()]
    lines += [action_to_json(r) for r in snapshot.tombstones.values()]
    lines += [action_to_json(Txn(app_id=a, version=v, last_updated=snapshot.timestamp))
              for a, v in snapshot.app_txns.items()]
    lines += [action_to_json(p) for p in snapshot.pins.values()]
    lines += [action_to_json(p) for p in snapshot.priors.values()]
    fmt = features.checkpoint_format(snapshot.protocol)
    extra: dict[str, str] = {}
    if snapshot.expired is not None and features.supports(snapshot.protocol, features.PINS):
        lines.append(action_to_json(snapshot.expired))
    elif snapshot.expired is not None:  # readers of tables without pins may know no expire action: a key they ignore
        extra["expired"] = snapshot.expired.model_dump_json()
    versions = sorted(snapshot.txns)
    txns = {"from": versions[0] if versions else snapshot.version + 1,
            "records": [list(snapshot.txns[v]) for v in versions]}
    meta = {"version": str(snapshot.version), "timestamp": str(snapshot.timestamp), "format": str(fmt),
            "actions": str(len(lines)), "sha256": _digest(lines),
            "txns": json.dumps(txns, separators=(",", ":")), **extra}
    buf = io.BytesIO()
    pq.write_table(pa.table({"action": pa.array(lines, pa.string())}, metadata=meta), buf, compression="zstd")
    return buf.getvalue()


def _digest(lines: list[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def decode_checkpoint(data: bytes, *, uri: str, path: str, version: int) -> SnapshotBuilder:
    """The state a checkpoint holds, after its self-check.

    Raises:
        CorruptLogError: the file is not Parquet, fails its checksum or row count, names another version, or
            holds a row that is not a valid action.
    """
    where = Where(uri, path, version, kind="checkpoint")
    try:
        # ParquetFile, not read_table: read_table goes through pyarrow.dataset, whose import (and pandas's,
        # which it pulls in) would cost every command that loads a snapshot most of its start-up time
        table = pq.ParquetFile(io.BytesIO(data)).read()
        lines = table.column("action").to_pylist()
        meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    except (pa.ArrowInvalid, OSError, KeyError, UnicodeDecodeError) as exc:  # damage anywhere, footer included
        raise where.corrupt(f"cannot be read ({' '.join(str(exc).split())})") from None
    if "format" in meta:
        _check(meta, lines, where)
    if any(not isinstance(line, str) for line in lines):
        raise where.corrupt("cannot be read (a row is null)")
    actions = decode_lines("\n".join(lines).encode(), where)
    builder = SnapshotBuilder()
    # A checkpoint's removes are tombstones of files that are not live: record them as they are.
    builder.apply(version, [a for a in actions if not isinstance(a, RemoveFile)])
    builder.tombstones.update((a.path, a) for a in actions if isinstance(a, RemoveFile))
    builder.timestamp = int(meta.get("timestamp", "0"))
    builder.txns = _records(meta, where) if "format" in meta else {}
    builder.base_checkpoint = version
    if "expired" in meta:
        try:
            builder.expire(Expire.model_validate_json(meta["expired"]))
        except ValueError:
            raise where.corrupt("cannot be read (malformed expire record)") from None
    return builder


def _check(meta: dict[str, str], lines: list[str], where: Where) -> None:
    try:
        fmt, held, count = int(meta["format"]), int(meta["version"]), int(meta["actions"])
        digest = meta["sha256"]
    except (KeyError, ValueError):
        raise where.corrupt(f"cannot be read (malformed metadata {sorted(meta)})") from None
    if fmt > FORMAT:
        from maintd.errors import UnsupportedProtocolError

        raise UnsupportedProtocolError(
            f"table {where.uri}: checkpoint {where.path} is in format {fmt}; this maintd reads up to format "
            f"{FORMAT}: upgrade maintd to read this table", required=fmt, supported=FORMAT)
    if held != where.version:
        raise where.corrupt(f"cannot be read (it holds version {held}, not the version its name gives)")
    if len(lines) != count or _digest([str(x) for x in lines]) != digest:
        raise where.corrupt(f"cannot be read (fails its checksum: {len(lines)} of {count} rows; damaged)")


def _records(meta: dict[str, str], where: Where) -> dict[int, tuple[str, int]]:
    try:
        doc = json.loads(meta["txns"])
        first = int(doc["from"])
        return {first + i: (str(txn), int(ts)) for i, (txn, ts) in enumerate(doc["records"])}
    except (KeyError, ValueError, TypeError):
        raise where.corrupt("cannot be read (malformed transaction records)") from None


__all__ = ["FORMAT", "decode_checkpoint", "encode_checkpoint"]
