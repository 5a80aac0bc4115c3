"""Local filesystem storage: put-if-absent by an atomic hard link of a fully written file.

Durability: the temporary file is ``fsync``ed before it is linked, and the directory is ``fsync``ed after
the link (and after every atomic replace), so that a commit that was acknowledged survives a power loss
(POSIX makes a new directory entry durable only when the directory itself is synced).

Containment: every path is checked by :func:`~maintd.storage.base.check_path`, and what it resolves to
(symbolic links followed) must lie below the table root.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pyarrow.fs as pafs

from maintd.errors import PathOutsideTableError, StoragePermissionError
from maintd.storage.base import FileInfo, Storage, check_path
from maintd.storage.threads import SharedThreads

_SYNC_THREADS = 16
"""Concurrent ``fsync`` calls of one batch: enough for the journal to group them, few enough to be cheap."""


_SYNC = SharedThreads(_SYNC_THREADS, "maintd-fsync")
"""The threads that sync batches (shared by every table of the process, started on first use)."""


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _no_link_below(root: Path, path: str, follow_last: bool) -> bool:
    """True when no component of ``path`` below ``root`` is a symbolic link (the last one not looked at
    unless ``follow_last``): a few ``lstat`` calls instead of two full ``realpath`` resolutions."""
    parts = path.split("/")
    current = str(root)
    for i, part in enumerate(parts):
        if i == len(parts) - 1 and not follow_last:
            return True
        current = f"{current}/{part}"
        try:
            if stat.S_ISLNK(os.lstat(current).st_mode):
                return False
        except FileNotFoundError:
            return True  # nothing below a missing component exists, so no link either
        except OSError:
            return False
    return True


_REFUSED = (errno.EACCES, errno.EPERM, errno.EROFS)


@contextlib.contextmanager
def _refusals(uri: str, op: str, path: str) -> Iterator[None]:
    """Turn a refusal of the filesystem (permission denied, read-only filesystem) into
    :class:`StoragePermissionError`: it is certain that nothing was written, so no caller retries it or
    treats it as a write whose outcome is unknown."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in _REFUSED:
            raise
        where = exc.filename or f"{uri}/{path}"
        raise StoragePermissionError(
            f"table {uri}: {op} {path} was refused: {os.strerror(exc.errno or 0)} ({where}); nothing was written. "
            "Give this user write access there, or use a writable location", uri=uri, path=str(where)) from None


def _is_link(path: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False
    except OSError:  # cannot tell: take the careful path
        return True


class LocalStorage(Storage):
    """A table in a local (or locally mounted, POSIX) directory."""

    lists_in_order = False
    coalesce_reads = False
    parallel_reads = False

    def __init__(self, uri: str) -> None:
        path = uri[len("file://") :] if uri.startswith("file://") else uri
        self._root = Path(path).expanduser().absolute()
        self._fs = pafs.LocalFileSystem()

    @property
    def uri(self) -> str:
        return str(self._root)

    @property
    def root(self) -> Path:
        return self._root

    @property
    def filesystem(self) -> pafs.FileSystem:
        return self._fs

    def _abs(self, path: str, *, allow_root: bool = False) -> Path:
        """The absolute path of ``path``, refused unless it is normalised (no symlink resolution)."""
        return self._root / check_path(path, root=self.uri, allow_root=allow_root)

    def _contained(self, path: str, *, follow_last: bool = True) -> Path:
        """As :meth:`_abs`, and what the path resolves to (symbolic links followed) lies below the root.

        With ``follow_last`` False only the directory is resolved: deleting a link removes the link.
        """
        full = self._abs(path)
        if _no_link_below(self._root, path, follow_last):  # then it resolves to the real root + path
            return full
        real_root = os.path.realpath(self._root)
        real = os.path.realpath(full) if follow_last else os.path.join(os.path.realpath(full.parent), full.name)
        if os.path.commonpath([real_root, real]) != real_root:
            raise PathOutsideTableError(
                f"table {self.uri}: {path} resolves to {real}, outside the table root (a symbolic link?); "
                "maintd never reads, writes or deletes outside the table"
            )
        return full

    def full_path(self, path: str) -> str:
        return str(self._contained(path))

    def full_paths(self, paths: Sequence[str]) -> list[str]:
        """As :meth:`full_path` of each, with the directories above the files looked at once per directory
        and each file's own name once (a bucket of 200 files: 200 ``lstat`` calls, not 600, and no path
        objects; under read threads that work holds the GIL)."""
        root = str(self._root)
        dirs: dict[str, bool] = {}
        out = []
        for path in paths:
            check_path(path, root=self.uri)
            directory = path.rpartition("/")[0]
            clean = dirs.get(directory)
            if clean is None:
                clean = dirs[directory] = _no_link_below(self._root, path, follow_last=False)
            full = os.path.join(root, path)
            if clean and not _is_link(full):
                out.append(full)
            else:  # a link somewhere: resolved, and refused if it leads outside the table
                out.append(self.full_path(path))
        return out

    def _write_temp(self, target: Path, data: bytes) -> Path:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.parent / f".tmp-{uuid.uuid4().hex}"
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        return tmp

    def _sync_dir(self, directory: Path) -> None:
        """``fsync`` a directory, so that the entries just created in it survive a power loss."""
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def put_if_absent(self, path: str, data: bytes) -> bool:
        target = self._contained(path)
        with _refusals(self.uri, "publishing", path):
            tmp = self._write_temp(target, data)
            try:
                os.link(tmp, target)
            except FileExistsError:
                return False
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
        self._sync_dir(target.parent)
        return True

    def write_atomic(self, path: str, data: bytes) -> None:
        target = self._contained(path)
        with _refusals(self.uri, "writing", path):
            tmp = self._write_temp(target, data)
            os.replace(tmp, target)
        self._sync_dir(target.parent)

    def update_atomic(self, path: str, change: Callable[[bytes | None], bytes | None]) -> bytes | None:
        """Read, change and replace ``path`` while holding an exclusive ``flock`` on its directory: every
        process updating a file of that directory on this host (or through a filesystem that passes ``flock``
        on) waits for the other; readers are not held up (the replace is atomic)."""
        target = self._contained(path)
        with _refusals(self.uri, "updating", path):
            target.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(target.parent, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                current: bytes | None = self.read(path)
            except FileNotFoundError:
                current = None
            new = change(current)
            if new is None:
                return current
            self.write_atomic(path, new)
            return new
        finally:
            os.close(fd)  # releases the lock

    def make_durable(self, path: str) -> None:
        target = self._contained(path)
        fd = os.open(target, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._sync_dir(target.parent)

    def make_durable_many(self, paths: Sequence[str]) -> None:
        """Sync the files in parallel (``fsync`` releases the GIL and the filesystem journal groups
        concurrent syncs into one commit), then each distinct directory once, from the files' own
        directories up to the table root (a directory made for the batch needs its entry synced too).

        Containment is checked once per directory; the files are opened with ``O_NOFOLLOW``, so a
        symbolic link in a file's place is refused rather than followed.
        """
        if not paths:
            return
        by_dir: dict[str, list[str]] = {}
        for p in paths:
            d, _, name = check_path(p, root=self.uri).rpartition("/")
            by_dir.setdefault(d, []).append(name)
        targets: list[Path] = []
        dirs: set[Path] = {self._root}
        for d, names in by_dir.items():
            real = self._contained(d) if d else self._root
            targets += [real / n for n in names]
            while real not in dirs and self._root in real.parents:
                dirs.add(real)
                real = real.parent
        pool = _SYNC.get()
        list(pool.map(_fsync_path, targets))
        list(pool.map(self._sync_dir, dirs))

    def read(self, path: str) -> bytes:
        with open(self._contained(path), "rb") as fh:
            return fh.read()

    def exists(self, path: str) -> bool:
        return self._abs(path).exists()

    def list_dir(self, path: str) -> list[FileInfo]:
        base = self._abs(path, allow_root=True)
        out: list[FileInfo] = []
        try:
            entries = os.scandir(base)
        except FileNotFoundError:
            return out
        with entries:
            for e in entries:
                try:
                    if not e.is_file(follow_symlinks=False):
                        continue
                    st = e.stat(follow_symlinks=False)
                except FileNotFoundError:  # removed since the directory was read (a writer's temp file)
                    continue
                rel = f"{path.rstrip('/')}/{e.name}" if path else e.name
                out.append(FileInfo(rel, st.st_size, int(st.st_mtime * 1000)))
        return out

    def walk(self, path: str = "") -> list[FileInfo]:
        base = self._abs(path, allow_root=True)
        out: list[FileInfo] = []
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                full = Path(dirpath) / name
                try:
                    st = full.stat()
                except FileNotFoundError:
                    continue
                out.append(FileInfo(full.relative_to(self._root).as_posix(), st.st_size, int(st.st_mtime * 1000)))
        return out

    def delete(self, path: str) -> bool:
        try:
            with _refusals(self.uri, "deleting", path):
                os.unlink(self._contained(path, follow_last=False))
            return True
        except FileNotFoundError:
            return False

    def makedirs(self, path: str) -> None:
        with _refusals(self.uri, "creating the directory", path):
            self._abs(path).mkdir(parents=True, exist_ok=True)

