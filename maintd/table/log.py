"""The transaction log: commit naming, atomic publication, latest-version lookup and checkpoints.

Commit ``v`` is the file ``_log/{18446744073709551615 - v:020d}.json`` so that a lexically
ordered listing returns the newest commit first (constant-time lookup on object stores). Local
filesystems list in no particular order, so the latest version is found from the hint
``_log/_last_checkpoint`` by probing forward with galloping search: a handful of ``stat`` calls
however long the history is. See docs/format.md, "Log".
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from maintd.errors import CorruptLogError, TableNotFoundError, VersionNotFoundError
from maintd.storage import Storage
from maintd.table.actions import Action, action_from_dict, action_to_json
from maintd.table.snapshot import Snapshot, SnapshotBuilder

LOG_DIR = "_log"
U64_MAX = 18446744073709551615
LAST_CHECKPOINT = f"{LOG_DIR}/_last_checkpoint"
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

    def commit_exists(self, version: int) -> bool:
        return self.storage.exists(commit_path(version))

    def is_table(self) -> bool:
        return self.storage.exists(LAST_CHECKPOINT) or self.commit_exists(0) or bool(self._listed()[0])

    # -- latest version ----------------------------------------------------------------------
    def latest_version(self, hint: int | None = None) -> int:
        """The newest committed version; raises :class:`TableNotFoundError` if there is none."""
        if self.storage.lists_in_order:
            commits, _ = self._listed()
            if not commits:
                raise TableNotFoundError(f"no table at {self.storage.uri} (no commits in {LOG_DIR}/)")
            return max(commits)
        start = max(hint if hint is not None else -1, self.last_checkpoint_hint() or -1)
        if start < 0 or not self.commit_exists(start):
            start = 0 if self.commit_exists(0) else self._oldest_commit_listed()
        return self._probe_forward(start)

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

    def write_checkpoint(self, snapshot: Snapshot) -> None:
        """Write the full state at ``snapshot.version`` as Parquet, then advance the hint."""
        lines = [action_to_json(snapshot.protocol), action_to_json(snapshot.metadata)]
        lines += [action_to_json(f) for f in snapshot.files.values()]
        lines += [action_to_json(r) for r in snapshot.tombstones.values()]
        from maintd.table.actions import Txn

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
        builder.apply(version, actions)
        builder.timestamp = int(meta.get(b"timestamp", b"0"))
        return builder

    def checkpoint_at_or_below(self, version: int, interval: int) -> int | None:
        """The newest checkpoint version <= ``version``, probing down before listing the log."""
        hint = self.last_checkpoint_hint()
        if hint is not None and hint <= version and version - hint <= 2 * interval:
            for v in range(version, hint - 1, -1):
                if self.checkpoint_exists(v):
                    return v
        floor = max(-1, version - 2 * interval)
        for v in range(version, floor, -1):
            if self.checkpoint_exists(v):
                return v
        _, checkpoints = self._listed()
        below = [c for c in checkpoints if c <= version]
        return max(below) if below else None

    # -- snapshots ---------------------------------------------------------------------------
    def load_snapshot(self, version: int | None = None, *, base: Snapshot | None = None) -> Snapshot:
        """The snapshot at ``version`` (latest if None): newest checkpoint plus the commits after it.

        ``base`` is a snapshot already in memory at or before ``version``; replay starts there.
        """
        latest = self.latest_version(hint=base.version if base else None)
        target = latest if version is None else version
        if target > latest or target < 0:
            raise VersionNotFoundError(
                f"table {self.storage.uri} has no version {target}; latest is {latest}",
                latest=latest, oldest_retained=None,
            )
        builder = self._start_builder(target, base)
        for v in range(builder.version + 1, target + 1):
            actions = self.read_commit(v)
            if actions is None:
                oldest = self.oldest_reconstructible_version()
                raise VersionNotFoundError(
                    f"table {self.storage.uri}: version {target} cannot be read, its log was reclaimed; "
                    f"the oldest retained version is {oldest}",
                    oldest_retained=oldest, latest=latest,
                )
            builder.apply(v, actions)
        try:
            return builder.build()
        except ValueError as exc:
            raise CorruptLogError(f"table {self.storage.uri}: {exc}") from None

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
