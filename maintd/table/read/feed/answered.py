"""Every row from prior-rows files: the changed rows, the BaseFile rows of their keys and their other DeltaFile rows.

Applies when prior-rows files not bounded to a key range (a clustering's looked-up files, or a compaction of one
unit) hold every row of the changed files (:meth:`GroupPriors.changed_rows`). Those files must also answer for
every BaseFile of both states (the same BaseFiles at both), and prior-rows files must hold the group's other
DeltaFiles of either state (:meth:`GroupPriors.answered`). The feed over commits no compaction has folded yet
then reads neither the BaseFiles nor the many small changed files; the states are built as a whole record's are.
"""

from __future__ import annotations

from maintd.table.read.feed.base import GroupFeed, Rows


class PriorRowsAnswer:
    name = "every row from prior-rows files"

    def answer(self, group: GroupFeed) -> Rows | None:
        if group.changed is None or (held := group.held) is None:
            return None
        rows = group.priors.answered(held, group.was, group.now, {f.path for f in group.changed})
        return None if rows is None else Rows(rows)


__all__ = ["PriorRowsAnswer"]
