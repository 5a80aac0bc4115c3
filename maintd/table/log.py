"""The transaction log: commit naming, atomic publication, latest-version lookup and checkpoints.

Commit ``v`` is the file ``_log/{18446744073709551615 - v:020d}.json`` so that a lexically
ordered listing returns the newest commit first (constant-time lookup on object stores). Local
filesystems list in no particular order, so the latest version is found from the hint
``_log/_last_checkpoint`` by probing forward with galloping search: a handful of ``stat`` calls
however long the history is. See docs/format.md, "Log".
"""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Iterable, Sequence
from types import MappingProxyType

import pyarrow as pa
import pyarrow.parquet as pq

from maintd.errors import CorruptLogError, TableNotFoundError, VersionNotFoundError
from maintd.storage import Storage
from maintd.table.actions import Action, AddFile, Metadata, RemoveFile, Txn, action_from_dict, action_to_json
from maintd.table.snapshot import Snapshot, SnapshotBuilder

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


def encode_commit(actions: Iterable[Action]) -> bytes:
    return ("\n".join(action_to_json(a) for a in actions) + "\n").encode()


def decode_commit(data: bytes, where: str) -> list[Action]:
    out: list[Action] = []
    for lineno, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(action_from_dict(json.loads(line)))
        except (ValueError, TypeError) as exc:
            raise CorruptLogError(
                f"{where} line {lineno} is not a valid log action ({exc}); the table cannot be read past it. "
                "Restore the file from backup or see docs/operations.md 'Recover'"
            ) from None
    return out


class TableLog:
    """Reads and writes the log of one table location."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    # -- commits ---------------------------------------------------------------------------
    def try_commit(self, version: int, actions: Sequence[Action]) -> bool:
        """Publish commit ``version`` unless it exists; True if this call created it."""
        return self.storage.put_if_absent(commit_path(version), encode_commit(actions))

    def read_commit(self, version: int) -> list[Action] | None:
        """The actions of commit ``version``, or None if it does not exist."""
        path = commit_path(version)
        try:
            data = self.storage.read(path)
        except FileNotFoundError:
            return None
        return decode_commit(data, f"{self.storage.uri}/{path}")

    def landed(self, version: int, actions: Sequence[Action]) -> bool:
        """Whether commit ``version``, just published by this process with ``actions``, is part of the table.

        Publishing can succeed into the reclaimed past: if a reclamation deleted the commit that stood at
        ``version`` (after checkpointing a newer version), put-if-absent creates the file again, below a
        checkpoint that does not hold it, where no reader ever looks. Reclamation deletes commits oldest
        first, so while the previous commit exists this cannot have happened (one ``stat``). Otherwise the
        oldest checkpoint at or after ``version`` tells: one at ``version`` itself, or one newer that holds
        this commit's files (or its metadata, or lacks what it removed), was built on top of this commit.
        """
        if version == 0 or self.commit_exists(version - 1):
            return True
        _, checkpoints = self._listed()
        above = [c for c in checkpoints if c >= version]
        if not above or min(above) == version:
            return True
        try:
            state = self.read_checkpoint(min(above))
        except FileNotFoundError:  # reclaimed meanwhile: a newer checkpoint decides
            return self.landed(version, actions)
        adds = [a.path for a in actions if isinstance(a, AddFile)]
        if adds:  # paths are unique: only this commit can have put them there
            return any(p in state.files or p in state.tombstones for p in adds)
        metadata = next((a for a in actions if isinstance(a, Metadata)), None)
        removes = [a for a in actions if isinstance(a, RemoveFile)]
        mine = all(  # removed by this commit, not by the one that stood at this version before
            (t := state.tombstones.get(r.path)) is not None and t.deletion_time == r.deletion_time for r in removes)
        return (metadata is None or state.metadata == metadata) and mine

    def delete_commit(self, version: int) -> bool:
        """Delete commit ``version`` (only ever one that did not land, or one reclamation expired)."""
        return self.storage.delete(commit_path(version))

    def commit_exists(self, version: int) -> bool:
        return self.storage.exists(commit_path(version))

    def is_table(self) -> bool:
        return self.storage.exists(LAST_CHECKPOINT) or self.commit_exists(0) or bool(self._listed()[0])

    # -- latest version ----------------------------------------------------------------------
    def latest_version(self, hint: int | None = None) -> int:
        """The newest committed version; raises :class:`TableNotFoundError` if there is none."""
        if self.storage.lists_in_order:
            return self._first_listed_commit()
        start = max(hint if hint is not None else -1, self.last_checkpoint_hint() or -1)
        if start < 0 or not self.commit_exists(start):
            start = 0 if self.commit_exists(0) else self._oldest_commit_listed()
        return self._probe_forward(start)

    def _first_listed_commit(self) -> int:
        """The newest commit on a store that lists in lexical order: the first commit name listed.

        Only a checkpoint of the same version (``.checkpoint.parquet`` sorts before ``.json``) and
        names that are not log files can come before it, so the first page almost always holds it.
        """
        limit = 8
        while True:
            listed = self.storage.list_first(LOG_DIR, limit)
            for info in listed:
                parsed = parse_log_name(info.path)
                if parsed is not None and parsed[0] == "commit":
                    return parsed[1]
            if len(listed) < limit:
                raise TableNotFoundError(f"no table at {self.storage.uri} (no commits in {LOG_DIR}/)")
            limit *= 8

    def _probe_forward(self, known: int) -> int:
        """Galloping search for the last existing commit at or after ``known`` (versions are dense)."""
        step = 1
        while self.commit_exists(known + step):
            known += step
            step *= 2
        lo, hi = known, known + step  # lo exists, hi does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.commit_exists(mid):
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

    def _oldest_commit_listed(self) -> int:
        commits, _ = self._listed()
        if not commits:
            raise TableNotFoundError(f"no table at {self.storage.uri} (no commits in {LOG_DIR}/)")
        return min(commits)

    def oldest_reconstructible_version(self) -> int:
        """The oldest version whose snapshot can still be rebuilt (commit 0, or the oldest checkpoint)."""
        commits, checkpoints = self._listed()
        if 0 in commits:
            return 0
        usable = [c for c in checkpoints if c <= max(commits, default=-1)]
        if not usable:
            raise TableNotFoundError(f"no table at {self.storage.uri}")
        return min(usable)

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

    def advance_reclaimed_watermark(self, version: int, timestamp: int) -> None:
        """Record that every tombstone removed at or before ``timestamp`` (commit ``version``) is deleted."""
        current = self.reclaimed_watermark()
        if current is None or current < timestamp:
            self.storage.write_atomic(RECLAIMED, json.dumps({"version": version, "timestamp": timestamp}).encode())

    def prune_tombstones(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` without the tombstones whose files reclamation has deleted (below the watermark)."""
        mark = self.reclaimed_watermark()
        if mark is None or not any(r.deletion_time <= mark for r in snapshot.tombstones.values()):
            return snapshot
        kept = {p: r for p, r in snapshot.tombstones.items() if r.deletion_time > mark}
        return dataclasses.replace(snapshot, tombstones=MappingProxyType(kept))

    def write_checkpoint(self, snapshot: Snapshot) -> Snapshot:
        """Write the full state at ``snapshot.version`` as Parquet, then advance the hint.

        Tombstones whose files reclamation has deleted are left out, so checkpoints do not grow with
        every file ever removed. Returns the snapshot as checkpointed (those tombstones dropped).
        """
        snapshot = self.prune_tombstones(snapshot)
        lines = [action_to_json(snapshot.protocol), action_to_json(snapshot.metadata)]
        lines += [action_to_json(f) for f in snapshot.files.values()]
        lines += [action_to_json(r) for r in snapshot.tombstones.values()]
        lines += [
            action_to_json(Txn(app_id=a, version=v, last_updated=snapshot.timestamp))
            for a, v in snapshot.app_txns.items()
        ]
        table = pa.table({"action": pa.array(lines, pa.string())},
                         metadata={"version": str(snapshot.version), "timestamp": str(snapshot.timestamp)})
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="zstd")
        self.storage.put_if_absent(checkpoint_path(snapshot.version), buf.getvalue())
        current = self.last_checkpoint_hint()
        if current is None or current < snapshot.version:
            hint = {"version": snapshot.version, "files": len(snapshot.files)}
            self.storage.write_atomic(LAST_CHECKPOINT, json.dumps(hint).encode())
        return snapshot

    def checkpoint_exists(self, version: int) -> bool:
        return self.storage.exists(checkpoint_path(version))

    def read_checkpoint(self, version: int) -> SnapshotBuilder:
        path = checkpoint_path(version)
        where = f"{self.storage.uri}/{path}"
        try:
            table = pq.read_table(io.BytesIO(self.storage.read(path)))
        except (pa.ArrowInvalid, OSError) as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            raise CorruptLogError(f"checkpoint {where} cannot be read ({exc})") from None
        meta = table.schema.metadata or {}
        builder = SnapshotBuilder()
        actions = decode_commit("\n".join(table.column("action").to_pylist()).encode(), where)
        # A checkpoint's removes are tombstones of files that are not live: record them as they are.
        builder.apply(version, [a for a in actions if not isinstance(a, RemoveFile)])
        builder.tombstones.update((a.path, a) for a in actions if isinstance(a, RemoveFile))
        builder.timestamp = int(meta.get(b"timestamp", b"0"))
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
        _, checkpoints = self._listed()
        below = [c for c in checkpoints if c <= version]
        return max(below) if below else None

    # -- snapshots ---------------------------------------------------------------------------
    def load_snapshot(self, version: int | None = None, *, base: Snapshot | None = None) -> Snapshot:
        """The snapshot at ``version`` (latest if None): newest checkpoint plus the commits after it.

        ``base`` is a snapshot already in memory at or before ``version``; replay starts there. The
        latest state is always loadable: if reclamation moves past the version found as the latest while
        it is being loaded, the load starts again from the new latest version.
        """
        if version is not None:
            return self._load(version, base)
        for _ in range(4):
            try:
                return self._load(None, base)
            except VersionNotFoundError:
                continue
        return self._load(None, base)

    def _load(self, version: int | None, base: Snapshot | None) -> Snapshot:
        latest = self.latest_version(hint=base.version if base else None)
        target = latest if version is None else version
        if target > latest or target < 0:
            raise VersionNotFoundError(
                f"table {self.storage.uri} has no version {target}; latest is {latest}",
                latest=latest, oldest_retained=None,
            )
        builder = self._replay(self._start_builder(target, base), target)
        if builder is None:
            # Reclamation deleted commits after the starting point while they were being read; it writes a
            # checkpoint at the oldest retained version first, so a fresh start finds a newer checkpoint.
            builder = self._replay(self._start_builder(target, None), target)
        if builder is None:
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

    def _replay(self, builder: SnapshotBuilder, target: int) -> SnapshotBuilder | None:
        """Apply the commits after ``builder`` up to ``target``; None if one of them is gone."""
        for v in range(builder.version + 1, target + 1):
            actions = self.read_commit(v)
            if actions is None:
                return None
            builder.apply(v, actions)
        return builder

    def _start_builder(self, target: int, base: Snapshot | None) -> SnapshotBuilder:
        if base is not None and base.version <= target:
            return SnapshotBuilder.from_snapshot(base)
        interval = base.checkpoint_interval if base is not None else 10
        cp = self.checkpoint_at_or_below(target, interval)
        if cp is not None:
            try:
                return self.read_checkpoint(cp)
            except FileNotFoundError:
                pass  # reclaimed between probe and read: fall back to the commits
        if not self.commit_exists(0):
            oldest = self.oldest_reconstructible_version()
            raise VersionNotFoundError(
                f"table {self.storage.uri}: version {target} has expired; the oldest retained version is {oldest}",
                oldest_retained=oldest,
            )
        return SnapshotBuilder()
