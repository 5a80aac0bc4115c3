"""Helpers of the table-format tests: a plain dict model of a table, maintenance rewrites, test storages.

The model is the specification in executable form: a table at a version is a dict from key
(partition values, primary-key values) to the row and the version that wrote it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pytest

from maintd import CommitConflictError, CommitRetriesExhaustedError, Table, Transaction
from maintd.execution import ExecutionOptions, run_plan
from maintd.planner import default_policy, plan, with_overrides
from maintd.storage import FileInfo, LocalStorage, storage_for_uri
from maintd.table.files.datafiles import read_data_file, write_data_file
from maintd.table.files.merge import latest_rows, sort_by_key_version
from maintd.table.log.snapshot import PartitionKey, Snapshot
from maintd.table.log.tablelog import parse_log_name

Key = tuple[Any, ...]
Row = dict[str, Any]


@dataclass
class Model:
    """The expected visible rows of a table, version by version."""

    columns: tuple[str, ...]
    primary_key: tuple[str, ...]
    partition_by: tuple[str, ...] = ()
    rows: dict[Key, tuple[Row, int]] = field(default_factory=dict)
    versions: dict[int, dict[Key, tuple[Row, int]]] = field(default_factory=dict)

    def key(self, row: Mapping[str, Any]) -> Key:
        return tuple(row[c] for c in (*self.partition_by, *self.primary_key))

    def full(self, row: Mapping[str, Any]) -> Row:
        return {c: row.get(c) for c in self.columns}

    def upsert(self, version: int, rows: Iterable[Mapping[str, Any]]) -> None:
        for r in rows:  # in order: the last occurrence of a key wins
            self.rows[self.key(r)] = (self.full(r), version)
        self.commit(version)

    def delete(self, version: int, keys: Iterable[Mapping[str, Any]]) -> None:
        for k in keys:
            self.rows.pop(self.key(k), None)
        self.commit(version)

    def overwrite(self, version: int, rows: Sequence[Mapping[str, Any]],
                  partition: Mapping[str, Any] | None) -> None:
        for k in list(self.rows):
            if partition is None or all(k[i] == partition[c] for i, c in enumerate(self.partition_by)):
                del self.rows[k]
        self.upsert(version, rows)

    def unchanged(self, version: int) -> None:
        """A commit that changes no rows (properties, maintenance)."""
        self.commit(version)

    def commit(self, version: int) -> None:
        self.versions[version] = dict(self.rows)

    def visible(self, version: int | None = None) -> list[Row]:
        state = self.rows if version is None else self.versions[version]
        return [state[k][0] for k in sorted(state, key=_sortable)]

    def diff(self, start: int, end: int) -> list[Row]:
        """The net changes from ``start`` to ``end`` as ``Table.changes`` reports them."""
        a, b = self.versions[start], self.versions[end]
        out = []
        for k in sorted(set(a) | set(b), key=_sortable):
            if k not in b:
                out.append(a[k][0] | {"_change": "delete", "_change_version": None})
            elif k not in a:
                out.append(b[k][0] | {"_change": "insert", "_change_version": b[k][1]})
            elif a[k][0] != b[k][0]:
                out.append(b[k][0] | {"_change": "update", "_change_version": b[k][1]})
        return out


def _sortable(k: Key) -> tuple[tuple[bool, Any], ...]:
    return tuple((v is None, v) for v in k)


def sorted_rows(t: pa.Table, keys: Sequence[str]) -> list[Row]:
    """Rows of ``t`` as dicts, ordered by ``keys`` (readers return buckets in no fixed key order)."""
    return sorted(t.to_pylist(), key=lambda r: _sortable(tuple(r[k] for k in keys)))


def log_versions(root: str | Path) -> list[int]:
    """Every commit version present in ``_log/``, ascending (a local directory or an object-store URI)."""
    parsed = [parse_log_name(f.path) for f in storage_for_uri(str(root)).list_dir("_log")]
    return sorted(p[1] for p in parsed if p is not None and p[0] == "commit")


def data_files_on_disk(root: str | Path) -> set[str]:
    """Every Parquet data file below the table root (a local directory or an object-store URI)."""
    return {f.path for f in storage_for_uri(str(root)).walk()
            if f.path.endswith(".parquet") and not f.path.startswith("_log/")}


# -- the conflict table of docs/format.md ("Conflicts") ---------------------------------------------------------

OPERATIONS = ("append", "key delete", "overwrite", "metadata change", "clustering", "compaction")
LEVELS = ("WriteSerializable", "Serializable")
NONE = "—"

# winner -> loser -> (outcome under WriteSerializable, outcome under Serializable); NONE: no conflict.
_MD = ("MetadataChangedError", "MetadataChangedError")
_OK = (NONE, NONE)
_DD = ("ConcurrentDeleteDeleteError", "ConcurrentDeleteDeleteError")
_APPEND_S = (NONE, "ConcurrentAppendError")
CONFLICTS: dict[str, dict[str, tuple[str, str]]] = {
    "append": {"append": _OK, "key delete": _OK, "overwrite": _APPEND_S, "metadata change": _OK,
               "clustering": _OK, "compaction": _OK},
    "key delete": {"append": _OK, "key delete": _OK, "overwrite": _APPEND_S, "metadata change": _OK,
                   "clustering": _OK, "compaction": _OK},
    "overwrite": {"append": _OK, "key delete": _OK,
                  "overwrite": ("ConcurrentAppendError", "ConcurrentAppendError"), "metadata change": _OK,
                  "clustering": _DD, "compaction": _DD},
    "metadata change": dict.fromkeys(OPERATIONS, _MD),
    "clustering": {"append": _OK, "key delete": _OK, "overwrite": _OK, "metadata change": _OK,
                   "clustering": _DD, "compaction": _DD},
    "compaction": {"append": _OK, "key delete": _OK, "overwrite": _OK, "metadata change": _OK,
                   "clustering": _DD, "compaction": _DD},
}

# -- maintenance: data_change=false rewrites of one bucket ---------------------------------------------------------

RewriteKind = Literal["cluster", "compact"]


def groups(snapshot: Snapshot) -> list[tuple[PartitionKey, int]]:
    """The (partition, bucket) groups of a snapshot, in a stable order."""
    return sorted(snapshot.by_bucket(), key=lambda g: (str(g[0]), g[1]))


@dataclass
class PreparedRewrite:
    """A maintenance transaction whose output files are written; commit it with :meth:`commit`."""

    table: Table
    txn: Transaction
    outputs: list[str]

    def commit(self) -> int:
        """Commit; when the commit certainly did not land, delete the outputs (as maintenance does)."""
        try:
            return self.txn.commit()
        except (CommitConflictError, CommitRetriesExhaustedError):
            for path in self.outputs:
                self.table.storage.delete(path)
            raise


POLICIES = {
    "cluster": with_overrides(default_policy(), {"clustering": {"level1": {"min_files": 2}},
                                                 "compaction": {"enabled": False}}),
    "compact": with_overrides(default_policy(), {"clustering": {"enabled": False},
                                                 "compaction": {"max_delta_files": 1, "min_interval_hours": 0}}),
}
"""Policies under which maintd's planner clusters (level 0 to 1), or compacts, every bucket of two files or more."""


def maintain(table: Table, kind: RewriteKind, *, target_file_bytes: int | None = None) -> int | None:
    """maintd's own maintenance of ``table`` as ``maintd run`` does it: the planner (clustering or compaction,
    :data:`POLICIES`), execution in process (threads) and the commit. Returns the version it committed, None
    when nothing was planned; raises when a task or the commit failed."""
    policy = POLICIES[kind]
    if target_file_bytes is not None:
        policy = with_overrides(policy, {"compaction": {"target_file_bytes": target_file_bytes}})
    made = plan(table.snapshot(), policy, datetime.now(UTC), table.uri)
    if not made.tasks:
        return None
    report = run_plan(made, table, None, ExecutionOptions(in_process_workers="threads", in_process_threads=2),
                      commit=True)
    failed = [r.error for r in report.results if not r.ok]
    assert not failed, f"maintenance tasks failed: {failed}"
    assert report.outcome is not None and report.outcome.version is not None, report.outcome
    assert len(report.outcome.versions) == 1, report.outcome  # one commit: the version after the one it read
    return report.outcome.version


def rewrite_bucket(table: Table, snapshot: Snapshot, group: tuple[PartitionKey, int], kind: RewriteKind
                   ) -> PreparedRewrite | None:
    """Prepare a maintenance rewrite of one bucket as of ``snapshot``."""
    return rewrite_buckets(table, snapshot, [group], kind)


def rewrite_buckets(table: Table, snapshot: Snapshot, selected: Iterable[tuple[PartitionKey, int]],
                    kind: RewriteKind) -> PreparedRewrite | None:
    """Prepare one maintenance transaction (``data_change=false``) rewriting each selected bucket.

    For the table layer's own tests, which need a rewrite of chosen buckets as of a chosen snapshot, committed
    when they say (conflict matrices, log and encoding tests); tests of what maintenance does to a table (the
    model tests, the multi-process tests, the model check) run maintd's own maintenance (:func:`maintain`).

    ``cluster`` merges a bucket's level-0 files into one level-1 DeltaFile keeping every row
    version; ``compact`` folds all of its files into one BaseFile (latest row per key, no deletes).
    Returns None when no selected bucket has anything to rewrite.
    """
    md = snapshot.metadata
    keys = list(dict.fromkeys([*md.partition_by, *md.primary_key]))
    txn = table.new_transaction("OPTIMIZE", read_snapshot=snapshot)
    outputs: list[str] = []
    rewritten = 0
    for group in selected:
        files = snapshot.by_bucket().get(group, [])
        inputs = [f for f in files if f.kind == "delta" and f.level == 0] if kind == "cluster" else files
        if not inputs:
            continue
        rewritten += 1
        rows = pa.concat_tables([read_data_file(table.storage, md, f) for f in inputs], promote_options="default")
        merged = latest_rows(rows, keys) if kind == "compact" else sort_by_key_version(rows, keys, newest_first=False)
        for f in inputs:
            txn.remove(f, data_change=False)
        if merged.num_rows:
            add = write_data_file(
                table.storage, md, merged, partition=dict(group[0]), bucket=group[1],
                kind="base" if kind == "compact" else "delta", level=None if kind == "compact" else 1,
                min_version=min(f.min_version for f in inputs), max_version=max(f.max_version for f in inputs),
                min_commit_time=min(f.min_commit_time for f in inputs),
                max_commit_time=max(f.max_commit_time for f in inputs), data_change=False,
            )
            txn.add(add)
            outputs.append(add.path)
    return PreparedRewrite(table, txn, outputs) if rewritten else None


# -- storages for log tests ---------------------------------------------------------------------------------------


class CountingStorage(LocalStorage):
    """A local storage that counts the calls the log makes, to show what a lookup costs."""

    def __init__(self, uri: str) -> None:
        super().__init__(uri)
        self.calls: dict[str, int] = {}
        self.entries_listed = 0
        self.reads: list[str] = []

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def exists(self, path: str) -> bool:
        self._count("exists")
        return super().exists(path)

    def read(self, path: str) -> bytes:
        self._count("read")
        self.reads.append(path)
        return super().read(path)

    def list_dir(self, path: str) -> list[FileInfo]:
        self._count("list_dir")
        out = super().list_dir(path)
        self.entries_listed += len(out)
        return out

    def list_first(self, path: str, limit: int) -> list[FileInfo]:
        self._count("list_first")
        out = sorted(super().list_dir(path), key=lambda f: f.path)[:limit]
        self.entries_listed += len(out)
        return out


class OrderedStorage(CountingStorage):
    """Behaves as an object store does: listings come in lexical order, bounded listings are cheap."""

    lists_in_order = True


class LostAnswerStorage(LocalStorage):
    """Publishes commits but reports the first ``lose`` of them as refused: the answer got lost."""

    def __init__(self, uri: str, lose: int = 1) -> None:
        super().__init__(uri)
        self.lose = lose

    def put_if_absent(self, path: str, data: bytes) -> bool:
        created = super().put_if_absent(path, data)
        if created and self.lose > 0 and path.endswith(".json"):
            self.lose -= 1
            return False
        return created


class RefusingStorage(LocalStorage):
    """Refuses every commit after ``allow`` of them, as if another writer always won the race."""

    def __init__(self, uri: str, allow: int = 0) -> None:
        super().__init__(uri)
        self.allow = allow
        self.refused = 0

    def put_if_absent(self, path: str, data: bytes) -> bool:
        if path.endswith(".json"):
            if self.allow <= 0:
                self.refused += 1
                return False
            self.allow -= 1
        return super().put_if_absent(path, data)


# -- races: a winner commits between a loser's read and its commit --------------------------------------------------


def race(monkeypatch: Any, loser: Callable[[], Any], winner: Callable[[], Any]) -> Any:
    """Run ``loser``; just before its first commit attempt, run ``winner`` to completion.

    The loser has read its snapshot already, so the winner takes the version it wanted and the
    loser must check itself against the winner's commit.
    """
    original = Transaction.commit
    fired = False

    def commit(self: Transaction, **kwargs: Any) -> int:
        nonlocal fired
        if not fired:
            fired = True
            winner()
        return original(self, **kwargs)

    monkeypatch.setattr(Transaction, "commit", commit)
    try:
        return loser()
    finally:
        monkeypatch.setattr(Transaction, "commit", original)


class FailingAfterPublishStorage(LocalStorage):
    """Publishes the next commit, then fails as a storage would after an ambiguous network error."""

    def put_if_absent(self, path: str, data: bytes) -> bool:
        created = super().put_if_absent(path, data)
        if path.endswith(".json"):
            raise OSError(f"connection reset while publishing {path}")
        return created


def feed_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The data files the feed reads: rows of keys (files live at the two versions), or whole (changed files)."""
    seen: list[str] = []
    from maintd.table.read.feed import driver, keys

    rows_of_keys, whole = keys.read_rows_of_keys, driver.read_data_files

    def spy_keys(storage: Any, md: Any, f: Any, keys: pa.Table) -> pa.Table:
        seen.append(f.path)
        return rows_of_keys(storage, md, f, keys)

    def spy_whole(storage: Any, md: Any, files: Any, *args: Any) -> Any:
        seen.extend(f.path for f in files)
        return whole(storage, md, files, *args)

    monkeypatch.setattr(keys, "read_rows_of_keys", spy_keys)
    monkeypatch.setattr(driver, "read_data_files", spy_whole)
    return seen
