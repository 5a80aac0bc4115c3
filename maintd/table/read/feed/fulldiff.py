"""The full diff: both states of the group read whole (merge-on-read of its files at each version).

Applies to any group, so it comes last: it is the answer when the changed files are not known (a removed file
that no commit added: a damaged log), and :func:`maintd.table.read.feed.changes_between` uses it alone, as the
reference the other strategies are checked against. The driver reads every such group at once
(:class:`~maintd.table.read.feed.base.Whole`); the columns added between the two versions are nulls in the older
state.
"""

from __future__ import annotations

from maintd.table.read.feed.base import GroupFeed, Whole


class FullDiff:
    name = "full diff"

    def answer(self, group: GroupFeed) -> Whole:
        return Whole()


__all__ = ["FullDiff"]
