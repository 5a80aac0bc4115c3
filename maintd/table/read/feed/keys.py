"""The rows of some keys in one state of a group, read from its data files or from the prior-rows files that
stand in for them: the state the strategies that read data files build (:mod:`.changedrows`, :mod:`.datafiles`).

Of a state's files, a BaseFile is read for the keys its prior-rows files do not answer for (none, if they answer
for all), and a DeltaFile that a prior-rows file holds whole is not opened. Any other file is read for the keys
only (:func:`maintd.table.files.datafiles.read_rows_of_keys`: the row groups whose key statistics enclose one).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from maintd.table.files.datafiles import read_rows_of_keys, rows_with_keys
from maintd.table.files.merge import latest_rows
from maintd.table.log.actions import AddFile
from maintd.table.read.feed.base import GroupFeed
from maintd.table.read.reader import key_columns


def distinct_keys(rows: pa.Table, pk: Sequence[str]) -> pa.Table:
    """The distinct primary keys of ``rows``."""
    return rows.select(list(pk)).group_by(list(pk), use_threads=False).aggregate([])


def keyed_state(feed: GroupFeed, files: Sequence[AddFile], keys: pa.Table, cache: dict[str, pa.Table],
                shared: set[str], changed: pa.Table | None) -> pa.Table:
    """The visible rows of ``keys`` among ``files`` (one state of the group), as the diff takes them.

    ``cache``: rows already read, by path (the changed files read whole; filled with the rows of ``keys`` read
    here, so a file live at both versions is read once). ``changed``: the rows of every changed file of the
    group (the paths ``shared``), taken from prior-rows files: added once if any of those files is among ``files``.
    """
    storage, md, answers = feed.storage, feed.md, feed.priors
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
        return feed.schema.empty_table()
    merged = latest_rows(pa.concat_tables(parts, promote_options="default"), key_columns(md))
    return merged.select(feed.schema.names).cast(feed.schema)


__all__ = ["distinct_keys", "keyed_state"]
