"""The interface of the change feed's strategies: how one (partition, bucket) group's net changes are read.

A :class:`Strategy` is given a group's :class:`GroupFeed` (its files at both versions, the files the
data-changing commits between them added or removed, and its prior-rows files) and says whether it can answer,
and how. It answers with :class:`Rows` (every row either state needs, with versions; the states are built for
every such group in one pass, :func:`record_states`) or with :class:`Reads` (the two states, read once the files
it names are read whole, together with every other group's). Or it answers :class:`Whole`: both states are read
whole, with every other such group's, one merge-on-read per version. The driver
(:mod:`maintd.table.read.feed.driver`) walks its strategies in order and takes the first answer; the states of
every group are then diffed once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa

from maintd.storage import Storage
from maintd.table.files.lazy import lazy_module
from maintd.table.files.merge import latest_rows
from maintd.table.files.schema import OP_COLUMN, VERSION_COLUMN
from maintd.table.log.actions import AddFile, Metadata
from maintd.table.log.snapshot import PartitionKey, Snapshot
from maintd.table.read.feed.priors import GroupPriors, Held

if TYPE_CHECKING:
    import pyarrow.compute as pc
else:
    pc = lazy_module("pyarrow.compute")  # imported by the first call: see maintd.table.files.lazy

Group = tuple[PartitionKey, int]
States = tuple[pa.Table, pa.Table]


@dataclass
class GroupFeed:
    """What a strategy knows of one group: its live files at ``before`` and at ``after`` (``was``, ``now``), the
    files the data-changing commits between added or removed in it (``changed``; None: not known, a removed
    file of unknown origin) and its prior-rows files (``priors``, each read once). Used by one thread at a time."""

    storage: Storage
    before: Snapshot
    after: Snapshot
    group: Group
    was: Sequence[AddFile]
    now: Sequence[AddFile]
    changed: Sequence[AddFile] | None
    priors: GroupPriors
    schema: pa.Schema
    """The states' schema (:func:`maintd.table.read.feed.diff.state_schema`)."""
    names: list[str] = field(init=False)
    """The columns of rows read from data files and prior-rows files: the table's, then the hidden ones."""
    _held: tuple[Held | None] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.names = [*self.md.column_names, OP_COLUMN, VERSION_COLUMN]

    @property
    def md(self) -> Metadata:
        return self.after.metadata

    @property
    def start(self) -> int:
        return self.before.version

    @property
    def end(self) -> int:
        return self.after.version

    @property
    def held(self) -> Held | None:
        """The rows of the changed files, from prior-rows files (:meth:`GroupPriors.changed_rows`), or None;
        found once for every strategy that asks.

        Kept on the instance by hand: ``functools.cached_property`` holds one lock for all instances of the class
        while it computes (Python 3.11), which would let only one group's thread read its prior-rows files at a
        time.
        """
        if self._held is None:
            self._held = (None if self.changed is None
                          else self.priors.changed_rows(self.changed, self.start, self.end),)
        return self._held[0]


@dataclass(frozen=True)
class Rows:
    """Every row of the group's changed keys either state needs, with their versions: the state at a version is
    the newest row of each key of at most that version, deletes dropped (:func:`record_states`)."""

    rows: pa.Table


@dataclass(frozen=True)
class Reads:
    """The group's two states, read by ``states`` once the files ``whole`` are read whole (for every group
    together: many small files share the work of planning their reads), given by path as their rows with the
    hidden columns (:attr:`GroupFeed.names`)."""

    whole: Sequence[AddFile]
    states: Callable[[Mapping[str, pa.Table]], States]


@dataclass(frozen=True)
class Whole:
    """Both states of the group read whole: the merge-on-read of its files at each version, done for every such
    group together (one read of each version, its groups on threads)."""


Answer = Rows | Reads | Whole


class Strategy(Protocol):
    """One way of reading a group's net changes."""

    name: str

    def answer(self, group: GroupFeed) -> Answer | None:
        """How this strategy reads ``group``, or None if it cannot (the next one is asked)."""


def record_states(rows: Sequence[pa.Table], start: int, end: int, keys: Sequence[str]) -> States:
    """The visible rows at ``start`` and at ``end`` (newest row of each key, deletes dropped; ``keys``: the columns
    a row is identified by) from the :class:`Rows` answers of any number of groups."""
    t = pa.concat_tables(rows)
    v = t.column(VERSION_COLUMN)
    return (latest_rows(t.filter(pc.less_equal(v, start)), keys),
            latest_rows(t.filter(pc.less_equal(v, end)), keys))


__all__ = ["Answer", "Group", "GroupFeed", "Reads", "Rows", "States", "Strategy", "Whole", "record_states"]
