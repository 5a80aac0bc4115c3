"""The transaction log: commit naming, atomic publication, latest-version lookup and checkpoints.

Commit ``v`` is the file ``_log/{18446744073709551615 - v:020d}.json`` so that a lexically
ordered listing returns the newest commit first (constant-time lookup on object stores). Local
filesystems list in no particular order, so the latest version is found from the hint
``_log/_last_checkpoint`` by probing forward with galloping search: a handful of ``stat`` calls
however long the history is. See docs/format.md, "The log".
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Sequence
from types import MappingProxyType

from loguru import logger

from maintd.errors import CorruptLogError, TableNotFoundError, UnsupportedProtocolError, VersionNotFoundError
from maintd.storage import Storage
from maintd.table.log.actions import Action
from maintd.table.log.checkpoint import decode_checkpoint, encode_checkpoint
from maintd.table.log.commitfile import commit_txn_id, decode_commit, decode_commit_txn_id, encode_commit
from maintd.table.log.snapshot import Snapshot, SnapshotBuilder, unsupported_features

LOG_DIR = "_log"
U64_MAX = 18446744073709551615
LAST_CHECKPOINT = f"{LOG_DIR}/_last_checkpoint"
RECLAIMED = f"{LOG_DIR}/_reclaimed"
"""Reclamation watermark: the data files of every tombstone removed at or before its ``timestamp`` are deleted."""
_COMMIT_SUFFIX = ".json"
_CHECKPOINT_SUFFIX = ".checkpoint.parquet"


def commit_path(version: int) -> str:
    return f"{LOG_DIR}/{U64_MAX - version:020d}{_COMMIT_SUFFIX}"


def checkpoint_path(version: int) -> str:
    return f"{LOG_DIR}/{U64_MAX - version:020d}{_CHECKPOINT_SUFFIX}"


def parse_log_name(name: str) -> tuple[str, int] | None:
    """``("commit" | "checkpoint", version)`` for a log file name, None for anything else."""
    base = name.rsplit("/", 1)[-1]
    for kind, suffix in (("commit", _COMMIT_SUFFIX), ("checkpoint", _CHECKPOINT_SUFFIX)):
        stem = base[: -len(suffix)]
        if base.endswith(suffix) and len(stem) == 20 and stem.isdigit():
            return kind, U64_MAX - int(stem)
    return None


def oldest_buildable(commits: Iterable[int], checkpoints: Iterable[int], latest: int) -> int:
    """The oldest version that can still be built, from a listing of the log: 0 while commit 0 exists, else the
    oldest checkpoint within the unbroken run of commits ending at ``latest``.

    What reclamation plans from. A commit left below that run (published into removed history by a writer
    that died before taking it back) is no version of the table, and its commit time says nothing about the
    table's history, so it is never taken for the oldest version (nor for the oldest retained one). Nor is a
    commit whose checkpoints are gone (a reclamation stopped between its steps): it can no longer be built.
    """
    present = set(commits)
    run = latest
    while run - 1 in present:
        run -= 1
    if run == 0:
        return 0
    usable = [c for c in checkpoints if run <= c <= latest]
    return min(usable) if usable else run


def _warn_stray(uri: str, version: int) -> None:
    logger.warning("table {}: the commit file of version {} stands above a gap in the log (neither commit {} nor a "
                   "checkpoint of version {} exists): it is no version of the table (a writer published it into a "
                   "table that was dropped and created again, or rolled back); passed over, and reclamation "
                   "deletes it", uri, version, version - 1, version)


class TableLog:
    """Reads and writes the log of one table location."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    # -- commits ---------------------------------------------------------------------------
    def try_commit(self, version: int, actions: Sequence[Action], *, fmt: int = 2) -> bool:
        """Publish commit ``version`` unless it exists; True if this call created it.

        Raises whatever the storage raises, in which case the commit may or may not have been published:
        the caller must find out (:meth:`read_commit_txn`, :meth:`txn_in_history`), never assume.
        """
        return self.storage.put_if_absent(commit_path(version), encode_commit(actions, version=version, fmt=fmt))

    def read_commit(self, version: int) -> list[Action] | None:
        """The actions of commit ``version`` (after the file's self-check), or None if it does not exist."""
        path = commit_path(version)
        try:
            data = self.storage.read(path)
        except FileNotFoundError:
            return None
        return decode_commit(data, uri=self.storage.uri, path=path, version=version)

    def read_commit_txn(self, version: int) -> str | None:
        """The transaction id commit ``version`` carries (after the file's self-check), or None if it does not
        exist. Cheaper than :meth:`read_commit` for large commits: only the ``commit_info`` line is parsed."""
        path = commit_path(version)
        try:
            data = self.storage.read(path)
        except FileNotFoundError:
            return None
        return decode_commit_txn_id(data, uri=self.storage.uri, path=path, version=version)

    def txn_in_history(self, version: int) -> str | None:
        """The transaction id standing at ``version`` in the table's history, as a reader sees it now.

        Loads the latest state afresh (from the newest checkpoint, never from a state held in memory) and
        looks ``version`` up in its transaction records. A commit file at ``version`` that is not part of the
        history (published after reclamation removed that version) is not what this returns. None when the
        records no longer reach back to ``version``: then it cannot be told from the log any more.
        """
        return self.load_snapshot().txn_at(version)

    def delete_commit(self, version: int) -> bool:
        """Delete commit ``version`` (only ever one that did not land, or one reclamation expired)."""
        return self.storage.delete(commit_path(version))

    def commit_exists(self, version: int) -> bool:
        return self.storage.exists(commit_path(version))

    def is_table(self) -> bool:
        return self.storage.exists(LAST_CHECKPOINT) or self.commit_exists(0) or bool(self._listed()[0])

    # -- latest version ----------------------------------------------------------------------
    def latest_version(self, hint: int | None = None) -> int:
        """The newest committed version; raises :class:`TableNotFoundError` if there is none.

        On a store that lists in lexical order, the first commit name listed. Otherwise a probe forward that
        relies on no order, from ``_last_checkpoint`` while that checkpoint exists, else from the newest commit
        listed. ``hint`` (a version this process knows to exist) is used only from the newest checkpoint on,
        since below it a commit file may stand in removed history (docs/format.md, "Latest-version lookup").

        A commit file that stands above a gap (neither the commit before it nor a checkpoint of its own version
        exists) is no version of the table and is passed over (:meth:`stands_on_history`).
        """
        if self.storage.lists_in_order:
            found = self._first_listed_commit()
            if found is not None:
                return found
        checkpoint = self.last_checkpoint_hint()
        if checkpoint is not None and self.checkpoint_exists(checkpoint) and self.commit_exists(checkpoint):
            start = max(checkpoint, hint if hint is not None else -1)
        elif self.commit_exists(0):  # nothing was ever reclaimed (commits go oldest first): no gap anywhere
            start = max(0, hint if hint is not None else -1)
        else:
            start = self._newest_commit_listed()
        if not self.commit_exists(start):  # the hint was reclaimed meanwhile
            start = self._newest_commit_listed()
        return self._probe_forward(start)

    def stands_on_history(self, version: int, listed: set[str] | frozenset[str] = frozenset()) -> bool:
        """Whether commit ``version`` can be part of the table: it is commit 0, or the commit before it or a
        checkpoint of its own version exists (``listed``: log paths known to exist, asked before storage is).

        A commit is published only on top of the commit before it, and reclamation deletes that one only after
        writing a checkpoint at a version at or above this one. A commit file above a gap was published by a
        writer whose table was dropped and created again, or rolled back, under it.
        """
        if version == 0:
            return True
        before, own = commit_path(version - 1), checkpoint_path(version)
        if before in listed or own in listed:
            return True
        return self.storage.exists(before) or self.storage.exists(own)

    def _first_listed_commit(self) -> int | None:
        """The newest commit on a store that lists in lexical order: the first commit name listed that stands
        on the table's history; None if the listing showed that the store does not list in order.

        Only a checkpoint of the same version (``.checkpoint.parquet`` sorts before ``.json``) and
        names that are not log files can come before it, so the first page almost always holds it.
        """
        limit = 8
        while True:
            listed = self.storage.list_first(LOG_DIR, limit)
            if not self.storage.lists_in_order:  # the listing was out of order: nothing it says can be relied on
                return None
            names = {info.path for info in listed}
            for info in listed:
                parsed = parse_log_name(info.path)
                if parsed is None or parsed[0] != "commit":
                    continue
                if self.stands_on_history(parsed[1], names):
                    return parsed[1]
                _warn_stray(self.storage.uri, parsed[1])
            if len(listed) < limit:
                raise TableNotFoundError(f"no table at {self.storage.uri} (no commits in {LOG_DIR}/)")
            limit *= 8

    def _probe_forward(self, known: int) -> int:
        """The last commit of the unbroken run that starts at ``known`` (which exists). It is found by a galloping
        search that assumes the run is dense, then a look at the commit found, which must stand on the one before it (a
        commit file above a gap, published into a table created again or rolled back, is passed over)."""
        seen = {known}
        top = self._gallop(known, seen)
        while top > known and not self.stands_on_history(top, {commit_path(v) for v in seen}):
            _warn_stray(self.storage.uri, top)
            top = self._bisect(known, top, seen)
        return top

    def _exists(self, version: int, seen: set[int]) -> bool:
        if self.commit_exists(version):
            seen.add(version)
            return True
        return False

    def _gallop(self, known: int, seen: set[int]) -> int:
        step = 1
        while self._exists(known + step, seen):
            known += step
            step *= 2
        return self._bisect(known, known + step, seen)

    def _bisect(self, lo: int, hi: int, seen: set[int]) -> int:
        """The last existing commit between ``lo`` (exists) and ``hi`` (taken as missing), the run being dense."""
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._exists(mid, seen):
                lo = mid
            else:
                hi = mid
        return lo

    def _listed(self) -> tuple[list[int], list[int]]:
        commits: list[int] = []
        checkpoints: list[int] = []
        for info in self.storage.list_dir(LOG_DIR):
            parsed = parse_log_name(info.path)
            if parsed is None:
                continue
            (commits if parsed[0] == "commit" else checkpoints).append(parsed[1])
        return commits, checkpoints

    def _newest_commit_listed(self) -> int:
        """The newest commit of a full listing of the log that stands on the table's history."""
        names = {info.path for info in self.storage.list_dir(LOG_DIR)}
        commits = sorted((p[1] for p in map(parse_log_name, names) if p is not None and p[0] == "commit"),
                         reverse=True)
        if not commits:
            raise TableNotFoundError(f"no table at {self.storage.uri} (no commits in {LOG_DIR}/)")
        for version in commits:
            if self.stands_on_history(version, names):
                return version
            _warn_stray(self.storage.uri, version)
        return commits[-1]

    def oldest_reconstructible_version(self) -> int:
        """The oldest version whose snapshot can still be rebuilt (commit 0, or the oldest checkpoint within the
        unbroken run of commits up to the newest listed one)."""
        commits, checkpoints = self._listed()
        if not commits:
            raise TableNotFoundError(f"no table at {self.storage.uri}")
        return oldest_buildable(commits, checkpoints, max(commits))

    # -- checkpoints -------------------------------------------------------------------------
    def last_checkpoint_hint(self) -> int | None:
        try:
            return int(json.loads(self.storage.read(LAST_CHECKPOINT))["version"])
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return None

    def reclaimed_watermark(self) -> int | None:
        """The reclamation watermark (ms): tombstones removed at or before it have no file left on storage."""
        try:
            return int(json.loads(self.storage.read(RECLAIMED))["timestamp"])
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return None

    def reclaimed_version(self) -> int | None:
        """The oldest version the last complete reclamation kept: every version before it is expired, even
        if a log file that could still build one survives (a writer's late checkpoint of an old version)."""
        try:
            return int(json.loads(self.storage.read(RECLAIMED))["version"])
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return None

    def advance_reclaimed_watermark(self, version: int, timestamp: int) -> None:
        """Record that every tombstone removed at or before ``timestamp`` is deleted and that every version
        before ``version`` is expired.

        The two marks advance independently: commit timestamps come from the writers' clocks, so a later
        version can carry an earlier timestamp, and a reclamation that keeps a newer version must still
        advance the version mark even when its timestamp is not newer (and the other way round). Each mark
        only ever grows, also under concurrent reclamations: the file is read and replaced as one atomic update
        (:meth:`~maintd.storage.Storage.update_atomic`), so a run that read an older value cannot write it back
        over a newer one.
        """

        def advance(current: bytes | None) -> bytes | None:
            old_version: int | None = None
            old_timestamp: int | None = None
            try:
                record = json.loads(current or b"")
                old_version, old_timestamp = int(record["version"]), int(record["timestamp"])
            except (ValueError, KeyError, TypeError):
                pass
            new_version = version if old_version is None else max(old_version, version)
            new_timestamp = timestamp if old_timestamp is None else max(old_timestamp, timestamp)
            if (new_version, new_timestamp) == (old_version, old_timestamp):
                return None
            return json.dumps({"version": new_version, "timestamp": new_timestamp}).encode()

        self.storage.update_atomic(RECLAIMED, advance)

    def advance_checkpoint_hint(self, version: int, files: int) -> None:
        """Point ``_last_checkpoint`` at the checkpoint of ``version`` unless it names a newer one already; one
        atomic update, so that two writers of checkpoints never move it back."""

        def advance(current: bytes | None) -> bytes | None:
            try:
                named = int(json.loads(current or b"")["version"])
            except (ValueError, KeyError, TypeError):
                named = None
            if named is not None and named >= version:
                return None
            return json.dumps({"version": version, "files": files}).encode()

        self.storage.update_atomic(LAST_CHECKPOINT, advance)

    def prune_tombstones(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` without the tombstones whose files reclamation has deleted (below the watermark), nor
        the prior-rows files it deleted with them (removed at the same commit time as their BaseFiles; a
        looked-up one whose BaseFiles are all live has no deletion time yet, and stays)."""
        mark = self.reclaimed_watermark()
        times = [r.deletion_time for r in snapshot.tombstones.values()]
        times += [p.deletion_time for p in snapshot.priors.values() if not p.attached]
        if mark is None or not any(t <= mark for t in times):
            return snapshot
        kept = {p: r for p, r in snapshot.tombstones.items() if r.deletion_time > mark}
        priors = {p: r for p, r in snapshot.priors.items() if r.attached or r.deletion_time > mark}
        return dataclasses.replace(snapshot, tombstones=MappingProxyType(kept), priors=MappingProxyType(priors))

    def write_checkpoint(self, snapshot: Snapshot) -> Snapshot:
        """Write the full state at ``snapshot.version`` (with its transaction records), then advance the hint.

        Tombstones whose files reclamation has deleted are left out, so checkpoints do not grow with
        every file ever removed. Returns the snapshot as checkpointed (those tombstones dropped).
        """
        snapshot = self.prune_tombstones(snapshot)
        path = checkpoint_path(snapshot.version)
        if self.storage.put_if_absent(path, encode_checkpoint(snapshot)) and self._expired(snapshot.version):
            # written late, after reclamation expired its version: left, it would make that version look
            # buildable again to the next reclamation
            logger.info("table {}: version {} was expired while its checkpoint was written; removing the checkpoint",
                        self.storage.uri, snapshot.version)
            self.storage.delete(path)
            return snapshot
        if (self.last_checkpoint_hint() or -1) < snapshot.version:  # the common case reads the hint only
            self.advance_checkpoint_hint(snapshot.version, len(snapshot.files))
        return dataclasses.replace(snapshot, base_checkpoint=snapshot.version)

    def _expired(self, version: int) -> bool:
        """Whether reclamation expired ``version`` (below the reclaimed mark, or its commit deleted)."""
        reclaimed = self.reclaimed_version()
        return (reclaimed is not None and version < reclaimed) or not self.commit_exists(version)

    def checkpoint_exists(self, version: int) -> bool:
        return self.storage.exists(checkpoint_path(version))

    def read_checkpoint(self, version: int) -> SnapshotBuilder:
        """The state checkpoint ``version`` holds (``FileNotFoundError`` if it is gone, ``CorruptLogError``)."""
        path = checkpoint_path(version)
        builder = decode_checkpoint(self.storage.read(path), uri=self.storage.uri, path=path, version=version)
        if not builder.txns:  # written before transaction records: the commit it stands on still tells
            actions = self.read_commit(version)
            if actions is not None:
                builder.txns = {version: (commit_txn_id(actions), builder.timestamp)}
        return builder

    def checkpoint_at_or_below(self, version: int, interval: int) -> int | None:
        """The newest checkpoint version <= ``version``, probing down before listing the log."""
        hint = self.last_checkpoint_hint()
        floor = max(-1, version - 2 * interval)
        for v in range(version, max(floor, hint if hint is not None and hint <= version else -1), -1):
            if self.checkpoint_exists(v):
                return v
        if hint is not None and hint <= version and self.checkpoint_exists(hint):
            return hint  # the newest checkpoint written; a crash may leave it one checkpoint behind
        return self._checkpoint_listed_below(version + 1)

    def _checkpoint_listed_below(self, version: int) -> int | None:
        _, checkpoints = self._listed()
        below = [c for c in checkpoints if c < version]
        return max(below) if below else None

    # -- snapshots ---------------------------------------------------------------------------
    def load_snapshot(self, version: int | None = None, *, base: Snapshot | None = None) -> Snapshot:
        """The snapshot at ``version`` (latest if None): newest checkpoint plus the commits after it.

        ``base`` is a snapshot already in memory at or before ``version``; replay starts there. The
        latest state is always loadable: if reclamation moves past the version found as the latest while
        it is being loaded, the load starts again from the new latest version.

        Raises:
            VersionNotFoundError: ``version`` was never written or its log was reclaimed.
            CorruptLogError: a commit it needs, or every checkpoint it could start from, fails its check.
            UnsupportedProtocolError: the table needs a newer reader.
        """
        try:
            if version is not None:
                return self._load(version, base)
            for _ in range(4):
                try:
                    return self._load(None, base)
                except VersionNotFoundError:
                    continue
            return self._load(None, base)
        except UnsupportedProtocolError as exc:
            if str(exc).startswith("table "):
                raise
            if exc.features:
                raise unsupported_features(self.storage.uri, exc.features, required=exc.required,
                                           supported=exc.supported, write=False) from None
            raise UnsupportedProtocolError(f"table {self.storage.uri}: {exc}", required=exc.required,
                                           supported=exc.supported) from None

    def _load(self, version: int | None, base: Snapshot | None) -> Snapshot:
        latest = self.latest_version(hint=base.version if base else None)
        target = latest if version is None else version
        if target > latest or target < 0:
            raise VersionNotFoundError(
                f"table {self.storage.uri} has no version {target}; latest is {latest}",
                latest=latest, oldest_retained=None,
            )
        if version is not None and target < latest:
            reclaimed = self.reclaimed_version()
            if reclaimed is not None and target < reclaimed:
                raise VersionNotFoundError(
                    f"table {self.storage.uri}: version {target} cannot be read, reclamation expired it; "
                    f"the oldest retained version is {reclaimed}", latest=latest, oldest_retained=reclaimed,
                )
        builder = None
        if base is not None and base.version <= target:
            builder = self._replay(SnapshotBuilder.from_snapshot(base), target)
        skipped: CorruptLogError | None = None
        for _ in range(2):
            # Reclamation deleted commits after the starting point while they were being read; it writes a
            # checkpoint at the oldest retained version first, so a fresh start finds a newer checkpoint.
            if builder is not None:
                break
            start, skipped = self._fresh_start(target, base.checkpoint_interval if base is not None else 10)
            builder = self._replay(start, target)
        if builder is None:
            if skipped is not None:
                raise skipped  # the only way to this version was through the corrupt checkpoint
            oldest = self.oldest_reconstructible_version()
            raise VersionNotFoundError(
                f"table {self.storage.uri}: version {target} cannot be read, its log was reclaimed; "
                f"the oldest retained version is {oldest}",
                oldest_retained=oldest, latest=latest,
            )
        try:
            return builder.build()
        except ValueError as exc:
            raise CorruptLogError(f"table {self.storage.uri}: {exc}") from None

    def replay_from(self, base: Snapshot, target: int,
                    on_commit: Callable[[int, list[Action]], None]) -> Snapshot | None:
        """The snapshot at ``target`` built from ``base`` (at or before it) by applying the commits between,
        each also given to ``on_commit``; None if one of them is gone (then what ``on_commit`` saw is void).

        For a reader that needs the commits of a range anyway (the change feed): its end state costs
        no checkpoint read.
        """
        builder = self._replay(SnapshotBuilder.from_snapshot(base), target, on_commit)
        if builder is None:
            return None
        try:
            return builder.build()
        except ValueError as exc:
            raise CorruptLogError(f"table {self.storage.uri}: {exc}") from None

    def _replay(self, builder: SnapshotBuilder, target: int,
                on_commit: Callable[[int, list[Action]], None] | None = None) -> SnapshotBuilder | None:
        """Apply the commits after ``builder`` up to ``target``; None if one of them is gone.

        Then the commit the replay started from is read again: if it is gone or holds another transaction,
        reclamation removed it while (or before) the commits after it were read, and what was read may be a
        commit published into the removed history, which is no part of the table. None then as well.
        """
        anchor = builder.version
        expected = builder.txns.get(anchor, (None, 0))[0]
        for v in range(anchor + 1, target + 1):
            actions = self.read_commit(v)
            if actions is None:
                return None
            builder.apply(v, actions)
            if on_commit is not None:
                on_commit(v, actions)
        if target > anchor >= 0:
            found = self.read_commit_txn(anchor)
            if found is None or (expected is not None and found != expected):
                return None
        return builder

    def _fresh_start(self, target: int, interval: int) -> tuple[SnapshotBuilder, CorruptLogError | None]:
        """The newest readable checkpoint at or below ``target`` (else commit 0), and the first corrupt one skipped.

        A checkpoint that fails its check costs read time, never the table: it is reported and an older
        checkpoint (or the log from commit 0) is used instead, as long as the commits after it exist.
        """
        skipped: CorruptLogError | None = None
        cp = self.checkpoint_at_or_below(target, interval)
        while cp is not None:
            try:
                return self.read_checkpoint(cp), skipped
            except FileNotFoundError:
                pass  # reclaimed between probe and read: an older one, or the commits, will do
            except CorruptLogError as exc:
                logger.warning("{}; loading from an older checkpoint or the commits instead", exc)
                skipped = skipped or exc
            cp = self._checkpoint_listed_below(cp)
        if not self.commit_exists(0):
            if skipped is not None:
                raise skipped
            oldest = self.oldest_reconstructible_version()
            raise VersionNotFoundError(
                f"table {self.storage.uri}: version {target} has expired; the oldest retained version is {oldest}",
                oldest_retained=oldest,
            )
        return SnapshotBuilder(), skipped
