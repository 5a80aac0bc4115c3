"""The change feed: net changes in (start, end] read from what changed, not from two full reads.

A key's visible state can differ between two versions only if a data-changing commit in between wrote a
row of it (an upsert or a delete in a level-0 file) or took away a file holding it (an overwrite). So:

1. the *changed keys* are the keys of the files the data-changing commits of (start, end] added, and of
   the files they removed (only their key columns are read);
2. for each (partition, bucket) group holding a changed key, the rows of those keys are read from the
   group's files at ``start`` and at ``end`` (a file whose key range holds no changed key is skipped, and
   of the others only the row groups whose key statistics enclose a changed key are decoded; a file live
   at both versions is read once) and merged, greatest version per key;
3. the two small states are diffed exactly as the full diff does (:func:`maintd.table.reader.diff_states`).

Maintenance commits (``data_change=false``) move rows between files without changing any: their files
are read for step 2 only. The result equals :func:`maintd.table.reader.changes_between` over the touched
groups (the property tests check this on random histories), at the cost of the changed rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

from maintd.storage import Storage
from maintd.table.actions import AddFile, Metadata
from maintd.table.files import read_data_file, read_rows_of_keys
from maintd.table.merge import latest_rows
from maintd.table.reader import diff_states, key_columns, state_schema
from maintd.table.schema import OP_COLUMN, VERSION_COLUMN
from maintd.table.snapshot import PartitionKey, Snapshot, partition_key

Group = tuple[PartitionKey, int]
_THREADS = 4


def changed_files(before: Snapshot, added: Iterable[AddFile], removed: Iterable[str]) -> list[AddFile]:
    """The files whose rows data-changing commits wrote (``added``) or took away (``removed`` paths).

    A removed file was live at ``before`` or was added after it; one that is neither is refused (the
    caller passes every data-changing add of the range).
    """
    adds = {f.path: f for f in added}
    out = dict(adds)
    for path in removed:
        f = before.files.get(path) or adds.get(path)
        if f is None:
            raise KeyError(path)
        out[path] = f
    return list(out.values())


def incremental_changes(storage: Storage, before: Snapshot, after: Snapshot, changed: Sequence[AddFile]
                        ) -> pa.Table:
    """Net changes from ``before`` to ``after``, given every file a data-changing commit between them
    added or removed (:func:`changed_files`)."""
    md = after.metadata
    pb = md.partition_by
    by_group: dict[Group, list[AddFile]] = {}
    for f in changed:
        by_group.setdefault((partition_key(f.partition, pb), f.bucket or 0), []).append(f)
    was, now = before.by_bucket(), after.by_bucket()
    pk = list(md.primary_key)
    schema = state_schema(md)
    names = [*md.column_names, OP_COLUMN, VERSION_COLUMN]

    def group_states(item: tuple[Group, list[AddFile]]) -> tuple[pa.Table, pa.Table]:
        group, sources = item
        # every row of a changed file is a row of a changed key: such a file is read once, whole, and
        # serves both as a source of the changed keys and as its own rows in the states
        cache = {f.path: read_data_file(storage, md, f, threads=False).select(names) for f in sources}
        keys = pa.concat_tables([t.select(pk) for t in cache.values()], promote_options="default")
        keys = keys.group_by(pk, use_threads=False).aggregate([])
        return (_state(storage, md, was.get(group, []), keys, cache, schema),
                _state(storage, md, now.get(group, []), keys, cache, schema))

    with ThreadPoolExecutor(_THREADS) as pool:
        states = list(pool.map(group_states, sorted(by_group.items(), key=lambda kv: (str(kv[0][0]), kv[0][1]))))
    a = pa.concat_tables([s[0] for s in states]) if states else schema.empty_table()
    b = pa.concat_tables([s[1] for s in states]) if states else schema.empty_table()
    return diff_states(md, a, b)


def _state(storage: Storage, md: Metadata, files: Sequence[AddFile], keys: pa.Table, cache: dict[str, pa.Table],
           schema: pa.Schema) -> pa.Table:
    """The visible rows of ``keys`` among ``files`` (one group), as :func:`diff_states` takes them."""
    parts = []
    for f in files:
        if f.path not in cache:
            cache[f.path] = read_rows_of_keys(storage, md, f, keys)
        parts.append(cache[f.path])
    if not parts:
        return schema.empty_table()
    merged = latest_rows(pa.concat_tables(parts, promote_options="default"), key_columns(md))
    return merged.select(schema.names).cast(schema)


__all__ = ["changed_files", "incremental_changes"]
