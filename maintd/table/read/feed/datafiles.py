"""The incremental read from data files: the changed files read whole, the rest of the states for their keys.

Applies whenever the files the data-changing commits of the range added or removed are known. A key's state can
differ between the two versions only if one of those files holds a row of it, so every row of a changed file is
a row of a changed key. Each is read once, whole (with every other group's, :class:`Reads`), and serves both as
the source of the changed keys and as its own rows in the states. The rows of those keys in the group's other
live files are read as :mod:`maintd.table.read.feed.keys` reads them.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from maintd.table.read.feed.base import GroupFeed, Reads, States
from maintd.table.read.feed.keys import distinct_keys, keyed_state


class DataFiles:
    name = "data files"

    def answer(self, group: GroupFeed) -> Reads | None:
        if group.changed is None:
            return None
        sources = group.changed

        def states(whole: Mapping[str, pa.Table]) -> States:
            cache = {f.path: whole[f.path] for f in sources}
            keys = distinct_keys(pa.concat_tables([t.select(group.md.primary_key) for t in cache.values()],
                                                  promote_options="default"), group.md.primary_key)
            return (keyed_state(group, group.was, keys, cache, set(), None),
                    keyed_state(group, group.now, keys, cache, set(), None))

        return Reads(tuple(sources), states)


__all__ = ["DataFiles"]
