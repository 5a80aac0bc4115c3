"""A whole record: the prior-rows files of one compaction answer for every row of the group.

Applies when one compaction wrote a prior-rows file from every unit of its task for the group (so they hold every
DeltaFile row it read), its BaseFiles are live at both versions, and its DeltaFiles include every file the
data-changing commits of the range added (:meth:`GroupPriors.record`). The changed keys are then the keys of their
DeltaFile rows of versions in the range, and each state is the newest of their rows of at most its version. No
data file is read: a range of many small commits costs one file per compaction unit.
"""

from __future__ import annotations

from maintd.table.read.feed.base import GroupFeed, Rows


class WholeRecord:
    name = "whole record"

    def answer(self, group: GroupFeed) -> Rows | None:
        if group.changed is None:
            return None
        record = group.priors.record(group.changed, {f.path for f in group.was}, {f.path for f in group.now})
        return None if record is None else Rows(group.priors.rows(record, group.start, group.end))


__all__ = ["WholeRecord"]
