"""The changed rows from prior-rows files, the rest of the states from the data files.

Applies when prior-rows files not bounded to a key range hold every row of the group's changed files, all added
in the range (:meth:`GroupPriors.changed_rows`), but do not answer for every other row the states need. The
changed files are not opened; the rows of the changed keys in the group's other live files are read as
:mod:`maintd.table.read.feed.keys` reads them.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from maintd.table.read.feed.base import GroupFeed, Reads, States
from maintd.table.read.feed.keys import distinct_keys, keyed_state


class ChangedRowsFromPriors:
    name = "changed rows from prior-rows files"

    def answer(self, group: GroupFeed) -> Reads | None:
        if group.changed is None or (held := group.held) is None:
            return None
        changed = held.rows.select(group.names)  # the changed files' rows, as one table that stands for all of them
        shared = {f.path for f in group.changed}

        def states(_whole: Mapping[str, pa.Table]) -> States:
            keys = distinct_keys(changed, group.md.primary_key)
            cache: dict[str, pa.Table] = {}  # a file live at both versions is read once
            return (keyed_state(group, group.was, keys, cache, shared, changed),
                    keyed_state(group, group.now, keys, cache, shared, changed))

        return Reads((), states)


__all__ = ["ChangedRowsFromPriors"]
