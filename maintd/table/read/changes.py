"""The change feed: net changes in (start, end] read from what changed, not from two full reads.

A key's visible state can differ between two versions only if a data-changing commit in between wrote a
row of it (an upsert or a delete in a level-0 file) or took away a file holding it (an overwrite). So:

1. the *changed keys* are the keys of the files the data-changing commits of (start, end] added, and of
   the files they removed (only their key columns are read);
2. for each (partition, bucket) group holding a changed key, the rows of those keys are read from the
   group's files at ``start`` and at ``end`` (a file whose key range holds no changed key is skipped, and
   of the others only the row groups whose key statistics enclose a changed key are decoded; a file live
   at both versions is read once) and merged, greatest version per key;
3. the two small states are diffed exactly as the full diff does (:func:`maintd.table.read.reader.diff_states`).

In tables with ``changes.prior.rows``, the *prior-rows files* of later compactions stand in for the data
files (:mod:`maintd.table.read.priors`): when one compaction's files hold every row a group needs, steps 1 and 2
read those files only; otherwise they stand in for the BaseFiles they answer for. Changes that reach every
row group of a BaseFile then cost the changed rows rather than a decode of the bucket, and a range of many
small commits costs one file per compaction unit rather than one per commit.

Maintenance commits (``data_change=false``) move rows between files without changing any: their files
are read for step 2 only. The result equals :func:`maintd.table.read.reader.changes_between` over the touched
groups (the property tests check this on random histories), at the cost of the changed rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

from maintd.storage import Storage
from maintd.table.files.datafiles import read_data_files, read_rows_of_keys, rows_with_keys, with_hidden_columns
from maintd.table.files.merge import latest_rows
from maintd.table.files.schema import OP_COLUMN, VERSION_COLUMN
from maintd.table.log.actions import AddFile, Metadata, PriorRows
from maintd.table.log.snapshot import PartitionKey, Snapshot, by_group
from maintd.table.read.priors import GroupPriors, Held, record_states
from maintd.table.read.reader import diff_states, key_columns, state_schema

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


def incremental_changes(storage: Storage, before: Snapshot, after: Snapshot, changed: Sequence[AddFile],
                        priors: Iterable[PriorRows] = ()) -> pa.Table:
    """Net changes from ``before`` to ``after``, given every file a data-changing commit between them
    added or removed (:func:`changed_files`) and the prior-rows files the table holds (from its latest state:
    those of compactions after ``after`` too)."""
    md = after.metadata
    was, now = before.by_bucket(), after.by_bucket()
    prior_groups = by_group(priors, md.partition_by)
    pk = list(md.primary_key)
    schema = state_schema(md)
    names = [*md.column_names, OP_COLUMN, VERSION_COLUMN]
    ordered = sorted(by_group(changed, md.partition_by).items(), key=lambda kv: (str(kv[0][0]), kv[0][1]))
    answers = {g: GroupPriors(storage, md, prior_groups.get(g, [])) for g, _ in ordered}

    def record(item: tuple[Group, list[AddFile]]) -> list[PriorRows] | None:
        group, sources = item
        return answers[group].record(sources, {f.path for f in was.get(group, [])},
                                     {f.path for f in now.get(group, [])})

    def held_rows(item: tuple[Group, list[AddFile]]) -> tuple[Held | None, pa.Table | None]:
        """The group's changed rows from prior-rows files, and every row its states need if those files
        answer for all of them (else None)."""
        group, sources = item
        held = answers[group].changed_rows(sources, before.version, after.version)
        if held is None:
            return None, None
        need = {f.path for f in sources}
        return held, answers[group].answered(held, was.get(group, []), now.get(group, []), need)

    with ThreadPoolExecutor(_THREADS) as pool:
        records = dict(zip((g for g, _ in ordered), pool.map(record, ordered), strict=True))
        rest = [item for item in ordered if records[item[0]] is None]
        found = dict(zip((g for g, _ in rest), pool.map(held_rows, rest), strict=True))
    # the groups whose prior-rows files hold every row needed (a whole record, or the changed rows and the
    # BaseFile rows of their keys): one pass over all of their rows
    held = [answers[g].rows(rec, before.version, after.version) for g, _ in ordered if (rec := records[g])]
    held += [whole for g, _ in rest if (whole := found[g][1]) is not None]
    rest = [item for item in rest if found[item[0]][1] is None]
    # every row of a changed file is a row of a changed key: such a file is read once, whole, and serves both
    # as a source of the changed keys and as its own rows in the states. They are read together first: many
    # small level-0 files share the work of planning their reads (read_data_files). A group whose prior-rows
    # files hold those rows takes them from there instead
    every = [f for g, fs in rest if found[g][0] is None for f in fs]
    tables = read_data_files(storage, md, every, None, _THREADS)
    whole = {f.path: with_hidden_columns(t, f).select(names) for f, t in zip(every, tables, strict=True)}

    def group_states(item: tuple[Group, list[AddFile]]) -> tuple[pa.Table, pa.Table]:
        group, sources = item
        held = found[group][0]
        changed_rows = None if held is None else held.rows.select(names)
        if changed_rows is None:
            cache = {f.path: whole[f.path] for f in sources}
            keys = pa.concat_tables([t.select(pk) for t in cache.values()], promote_options="default")
        else:  # the changed files' rows, as one table that stands for all of them
            cache = {}
            keys = changed_rows.select(pk)
        keys = keys.group_by(pk, use_threads=False).aggregate([])
        shared = {f.path for f in sources} if changed_rows is not None else set()
        return (_state(storage, md, was.get(group, []), keys, cache, schema, answers[group], shared, changed_rows),
                _state(storage, md, now.get(group, []), keys, cache, schema, answers[group], shared, changed_rows))

    with ThreadPoolExecutor(_THREADS) as pool:
        states = list(pool.map(group_states, rest))
    if held:
        a, b = record_states(held, before.version, after.version, key_columns(md))
        states.append((a.select(schema.names).cast(schema), b.select(schema.names).cast(schema)))
    a = pa.concat_tables([s[0] for s in states]) if states else schema.empty_table()
    b = pa.concat_tables([s[1] for s in states]) if states else schema.empty_table()
    return diff_states(md, a, b)


def _state(storage: Storage, md: Metadata, files: Sequence[AddFile], keys: pa.Table, cache: dict[str, pa.Table],
           schema: pa.Schema, answers: GroupPriors, shared: set[str], changed: pa.Table | None) -> pa.Table:
    """The visible rows of ``keys`` among ``files`` (one group), as :func:`diff_states` takes them.

    ``changed``: the rows of every changed file of the group (the paths ``shared``), taken from prior-rows
    files: added once if any of those files is among ``files``.
    """
    usable = answers.usable({f.path for f in files})
    held = answers.base_rows(usable, keys)
    parts = [held] if held is not None else []
    if changed is not None and any(f.path in shared for f in files):
        parts.append(changed)
    for f in files:
        if f.path in shared:
            continue
        if f.kind != "base" and f.path not in cache and (rows := answers.file_rows(f, keys)) is not None:
            parts.append(rows)
            continue
        answered = answers.listed(usable, f.path, keys)
        if answered is None:
            if f.path not in cache:
                cache[f.path] = read_rows_of_keys(storage, md, f, keys)
            parts.append(cache[f.path])
            continue
        rest = rows_with_keys(keys, md.primary_key, answered, keep=False)
        if rest.num_rows:
            parts.append(read_rows_of_keys(storage, md, f, rest))
    if not parts:
        return schema.empty_table()
    merged = latest_rows(pa.concat_tables(parts, promote_options="default"), key_columns(md))
    return merged.select(schema.names).cast(schema)


__all__ = ["changed_files", "incremental_changes"]
