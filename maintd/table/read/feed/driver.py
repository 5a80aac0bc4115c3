"""The change feed's driver: the groups of a range, the strategy that reads each, and the one diff.

For each (partition, bucket) group the data-changing commits of (start, end] touched, the strategies of
:data:`STRATEGIES` are asked in order (on threads, a group per thread) and the first that can answer reads it
(:mod:`maintd.table.read.feed.base`). The files the :class:`Reads` answers read whole are then read together,
their states built on threads, the :class:`Whole` answers' groups read whole (one merge-on-read of each
version), the :class:`Rows` answers' states built in one pass, and every group's two states diffed once
(:func:`maintd.table.read.feed.diff.diff_states`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

from maintd.storage import Storage
from maintd.table.files.datafiles import read_data_files, with_hidden_columns
from maintd.table.files.evolution import fill_missing
from maintd.table.files.schema import OP_COLUMN, VERSION_COLUMN
from maintd.table.log.actions import AddFile, PriorRows
from maintd.table.log.snapshot import Snapshot, by_group
from maintd.table.read.feed.answered import PriorRowsAnswer
from maintd.table.read.feed.base import (
    Answer,
    Group,
    GroupFeed,
    Reads,
    Rows,
    States,
    Strategy,
    Whole,
    record_states,
)
from maintd.table.read.feed.changedrows import ChangedRowsFromPriors
from maintd.table.read.feed.datafiles import DataFiles
from maintd.table.read.feed.diff import diff_states, state_schema
from maintd.table.read.feed.fulldiff import FullDiff
from maintd.table.read.feed.priors import GroupPriors
from maintd.table.read.feed.record import WholeRecord
from maintd.table.read.reader import key_columns, read_snapshot

STRATEGIES: tuple[Strategy, ...] = (WholeRecord(), PriorRowsAnswer(), ChangedRowsFromPriors(), DataFiles(), FullDiff())
"""The strategies in the order they are asked: the cheapest read first; the full diff answers for any group."""
_THREADS = 4


def changed_files(before: Snapshot, added: Iterable[AddFile], removed: Iterable[str]) -> list[AddFile]:
    """The files whose rows data-changing commits wrote (``added``) or took away (``removed`` paths).

    A removed file was live at ``before`` or was added after it; one that is neither is refused (KeyError: the
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


def net_changes(storage: Storage, before: Snapshot, after: Snapshot, touched: Iterable[Group],
                changed: Sequence[AddFile] | None, priors: Iterable[PriorRows] = ()) -> pa.Table:
    """Net changes from ``before`` to ``after``: one row per key whose visible state differs, ``_change``
    (``insert``, ``update`` or ``delete``) and ``_change_version`` (the version of the row after the change;
    null for deletes); deleted keys show their last row; sorted by key.

    ``changed``: every file a data-changing commit between them added or removed (:func:`changed_files`); the
    groups are theirs. None: not known, the ``touched`` groups are diffed whole. ``priors``: the prior-rows files
    the table holds (from its latest state: those of compactions after ``after`` too).
    """
    if changed is None:
        return _feed(storage, before, after, dict.fromkeys(touched), priors, STRATEGIES)
    return _feed(storage, before, after, by_group(changed, after.metadata.partition_by), priors, STRATEGIES)


def changes_between(storage: Storage, before: Snapshot, after: Snapshot, touched: Iterable[Group]) -> pa.Table:
    """:func:`net_changes` of the ``touched`` groups by diffing two full reads of each (the reference)."""
    return _feed(storage, before, after, dict.fromkeys(touched), (), (FullDiff(),))


def _feed(storage: Storage, before: Snapshot, after: Snapshot, groups: Mapping[Group, Sequence[AddFile] | None],
          priors: Iterable[PriorRows], strategies: Sequence[Strategy]) -> pa.Table:
    """The net changes of ``groups`` (each with its changed files, None if not known), each read by the first
    of ``strategies`` that answers for it."""
    md = after.metadata
    was, now = before.by_bucket(), after.by_bucket()
    prior_groups = by_group(priors, md.partition_by)
    schema = state_schema(md)
    feeds = [GroupFeed(storage, before, after, g, was.get(g, []), now.get(g, []), changed,
                       GroupPriors(storage, md, prior_groups.get(g, [])), schema)
             for g, changed in sorted(groups.items(), key=lambda kv: (str(kv[0][0]), kv[0][1]))]

    def choose(feed: GroupFeed) -> Answer:
        for strategy in strategies:
            if (answer := strategy.answer(feed)) is not None:
                return answer
        raise AssertionError(f"no strategy answers for group {feed.group}")  # the full diff answers for any

    with ThreadPoolExecutor(_THREADS) as pool:
        answers = list(pool.map(choose, feeds))
    held = [a.rows for a in answers if isinstance(a, Rows)]
    reads = [a for a in answers if isinstance(a, Reads)]
    whole_groups = {f.group for f, a in zip(feeds, answers, strict=True) if isinstance(a, Whole)}
    # the files read whole, of every group together: many small level-0 files share the work of planning reads
    every = [f for a in reads for f in a.whole]
    names = [*md.column_names, OP_COLUMN, VERSION_COLUMN]
    whole = {f.path: with_hidden_columns(t, f).select(names)  # on this thread: Python-bound, it gains nothing on others
             for f, t in zip(every, read_data_files(storage, md, every, None, _THREADS), strict=True)}
    with ThreadPoolExecutor(_THREADS) as pool:
        states: list[States] = list(pool.map(lambda a: a.states(whole), reads))
    if whole_groups:  # the groups read whole: one merge-on-read of each version
        states.append(_whole_states(storage, before, after, whole_groups, schema))
    if held:  # the groups whose rows are all held: one pass over all of them
        a, b = record_states(held, before.version, after.version, key_columns(md))
        states.append((a.select(schema.names).cast(schema), b.select(schema.names).cast(schema)))
    a = pa.concat_tables([s[0] for s in states]) if states else schema.empty_table()
    b = pa.concat_tables([s[1] for s in states]) if states else schema.empty_table()
    return diff_states(md, a, b)


def _whole_states(storage: Storage, before: Snapshot, after: Snapshot, groups: set[Group],
                  schema: pa.Schema) -> States:
    """Both states of ``groups`` read whole; the columns added between the two versions are nulls at ``before``."""
    a = read_snapshot(storage, before, groups=groups, keep_hidden=True)
    b = read_snapshot(storage, after, groups=groups, keep_hidden=True)
    return fill_missing(a, schema, schema.names).cast(schema), b.select(schema.names).cast(schema)


__all__ = ["STRATEGIES", "changed_files", "changes_between", "net_changes"]
