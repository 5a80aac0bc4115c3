"""The full diff: both states of the group read whole (merge-on-read of its files at each version).

Applies to any group, so it comes last: it is the answer when the changed files are not known (a removed file
that no commit added: a damaged log), and :func:`maintd.table.read.feed.changes_between` uses it alone, as the
reference the other strategies are checked against. The columns added between the two versions are nulls in
the older state.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from maintd.table.files.evolution import fill_missing
from maintd.table.read.feed.base import GroupFeed, Reads, States
from maintd.table.read.reader import read_bucket


class FullDiff:
    name = "full diff"

    def answer(self, group: GroupFeed) -> Reads:
        schema = group.schema

        def states(_whole: Mapping[str, pa.Table]) -> States:
            a = read_bucket(group.storage, group.before.metadata, group.was, None, keep_hidden=True)
            b = read_bucket(group.storage, group.after.metadata, group.now, None, keep_hidden=True)
            return fill_missing(a, schema, schema.names).cast(schema), b.select(schema.names).cast(schema)

        return Reads((), states)


__all__ = ["FullDiff"]
