"""The storage interface every table location implements, the path rules it enforces, and the scheme registry.

The registry sits beside the interface because :meth:`Storage.at` opens through it; it names maintd's own
storages (:data:`BUILTIN_STORAGES`) and imports each on first use, so this module imports none of the storages
that import it.
"""

from __future__ import annotations

import abc
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow.fs as pafs

from maintd.errors import MaintdError, PathOutsideTableError, UnknownSchemeError


@dataclass(frozen=True, slots=True)
class FileInfo:
    """A file below the table root: path relative to the root, size in bytes, last-modified time in ms."""

    path: str
    size: int
    mtime_ms: int


def check_path(path: str, *, root: str = "", allow_root: bool = False) -> str:
    """``path`` if it is a normalised relative path below the table root, else :class:`PathOutsideTableError`.

    Normalised: ``/``-separated, no leading ``/``, no empty, ``.`` or ``..`` segment, no backslash or NUL.
    Every storage applies this to every path it is given, so no caller (a damaged log entry, a bug) can
    make a storage read, write or delete anything outside the table; a storage whose names can alias
    (symbolic links on a local disk) checks where the path resolves as well.
    """
    if path == "" and allow_root:
        return path
    if not isinstance(path, str) or not path or path.startswith("/") or "\\" in path or "\x00" in path or any(
            seg in ("", ".", "..") for seg in path.split("/")):
        where = f" of table {root}" if root else ""
        raise PathOutsideTableError(
            f"path {path!r} is not a normalised path inside the table root{where}: it must be relative, "
            "'/'-separated, without '.', '..' or empty segments; maintd never touches such a path"
        )
    return path


class Storage(abc.ABC):
    """Byte-level access to one table location. Paths are relative to the table root, '/'-separated.

    The one primitive commits need is :meth:`put_if_absent`. Its contract is written for object stores
    as much as for local disks: a call that *returns* says truthfully whether it created the file; a call
    that *raises* may or may not have applied (a conditional PUT whose answer was lost). Callers resolve
    that ambiguity by reading the path back (the transaction log compares the transaction id it wrote),
    never by assuming either outcome. Every other method raises ``OSError`` (or
    :class:`~maintd.errors.StorageError`) on failure, and :class:`~maintd.errors.PathOutsideTableError`
    for a path that :func:`check_path` refuses.
    """

    #: True when :meth:`list_dir` and :meth:`list_first` return names in lexical order (most object stores),
    #: so that the newest commit is the first name listed; False for local filesystems and for object stores
    #: that list in no particular order (S3 Express One Zone directory buckets, some S3-compatible servers,
    #: or any store configured with ``listing_order: unordered``). The log never relies on order it was not
    #: promised (docs/format.md, "Latest-version lookup").
    lists_in_order: bool = False
    #: True when a Parquet read should fetch the column chunks it needs in a few large ranged requests
    #: (pyarrow's pre-buffering): what object stores want. A local disk reads them as it decodes (False),
    #: which costs a small file less.
    coalesce_reads: bool = True
    #: True when reading several files at once is faster than one after the other: an object store's reads
    #: wait on the network. A local read is a copy from the page cache, for which threads only add their
    #: start-up and GIL hand-offs (False; docs/benchmarks.md, "Maintenance").
    parallel_reads: bool = True

    @property
    @abc.abstractmethod
    def uri(self) -> str:
        """The table location as given by the user, normalised."""

    @property
    @abc.abstractmethod
    def filesystem(self) -> pafs.FileSystem:
        """A pyarrow filesystem for reading and writing Parquet data files."""

    @abc.abstractmethod
    def full_path(self, path: str) -> str:
        """The path of ``path`` as understood by :attr:`filesystem` (after :func:`check_path`)."""

    def at(self, uri: str) -> Storage:
        """The storage of another location of the same store (a parent directory, a sibling table), opened with
        this storage's options (an object store's credentials and endpoint were resolved for this table)."""
        return storage_for_uri(uri)

    def full_paths(self, paths: Sequence[str]) -> list[str]:
        """:meth:`full_path` of each of ``paths``: a reader of many files asks once, and a storage may share
        its checks between the files of one directory."""
        return [self.full_path(p) for p in paths]

    @abc.abstractmethod
    def put_if_absent(self, path: str, data: bytes) -> bool:
        """Publish ``data`` at ``path`` atomically unless a file is there already.

        Returns True if this call created the file, False if it existed. Readers never see a partially
        written file. Raising means the outcome is unknown: the file may have been created.
        """

    @abc.abstractmethod
    def write_atomic(self, path: str, data: bytes) -> None:
        """Write or replace ``path`` atomically (used for hints such as ``_last_checkpoint``)."""

    @abc.abstractmethod
    def read(self, path: str) -> bytes:
        """Read a whole file; raises ``FileNotFoundError`` if it is not there."""

    @abc.abstractmethod
    def exists(self, path: str) -> bool:
        """True if ``path`` exists."""

    @abc.abstractmethod
    def list_dir(self, path: str) -> list[FileInfo]:
        """Files directly below directory ``path`` (empty if it does not exist)."""

    def list_first(self, path: str, limit: int) -> list[FileInfo]:
        """The first ``limit`` files directly below ``path``, in lexical order of their names.

        Object stores answer this with one bounded request (S3 ``ListObjectsV2`` with ``MaxKeys``,
        GCS ``maxResults``), which is what makes the latest-version lookup constant-time there.
        This default sorts a full listing; storages that list in order override it.
        """
        return sorted(self.list_dir(path), key=lambda f: f.path)[:limit]

    def list_subdirs(self, path: str) -> list[str]:
        """The names of the directories directly below ``path`` (on object stores: common prefixes)."""
        base = f"{path.rstrip('/')}/" if path else ""
        return sorted({f.path[len(base):].split("/", 1)[0] for f in self.walk(path) if "/" in f.path[len(base):]})

    @abc.abstractmethod
    def walk(self, path: str = "") -> list[FileInfo]:
        """Every file below ``path``, recursively."""

    @abc.abstractmethod
    def delete(self, path: str) -> bool:
        """Delete ``path``; returns False if it was already gone (idempotent)."""

    def delete_many(self, paths: Sequence[str]) -> dict[str, Exception]:
        """Delete every one of ``paths`` (idempotent: a path already gone counts as deleted); returns the
        error of each path that could not be deleted (empty when every path is gone).

        Object stores delete up to 1,000 keys in one request (S3 ``DeleteObjects``); a path is checked like
        any other. The default deletes one path after the other.
        """
        failed: dict[str, Exception] = {}
        for path in paths:
            try:
                self.delete(path)
            except (OSError, MaintdError) as exc:
                if isinstance(exc, PathOutsideTableError):
                    raise
                failed[path] = exc
        return failed

    def update_atomic(self, path: str, change: Callable[[bytes | None], bytes | None]) -> bytes | None:
        """Replace ``path`` by ``change(current)`` (None: absent) unless ``change`` returns None, atomically with
        respect to every other :meth:`update_atomic` of the path. Two updates never both read one value and
        then both write, so a value that only ever grows (the reclamation watermark, the checkpoint hint) is
        never moved back by a concurrent writer. Returns what the path holds afterwards.

        ``change`` may be called more than once (an update that lost a race calls it again with the new value).
        Local disks lock the directory; object stores write with a precondition on the version they read. This
        default, for storages that can do neither, is a read and an atomic replace: not safe against a
        concurrent update.
        """
        try:
            current: bytes | None = self.read(path)
        except FileNotFoundError:
            current = None
        new = change(current)
        if new is None:
            return current
        self.write_atomic(path, new)
        return new

    @abc.abstractmethod
    def makedirs(self, path: str) -> None:
        """Create directory ``path`` and its parents (no-op on object stores)."""

    def make_durable(self, path: str) -> None:
        """Make a file written through :attr:`filesystem` survive a power loss before a commit names it.

        A no-op by default: an object store's PUT is durable when it returns. Local disks ``fsync``.
        """
        return None

    def make_durable_many(self, paths: Sequence[str]) -> None:
        """:meth:`make_durable` for every path of one commit: one durability barrier for the whole batch.

        When it returns, every file and its directory entry survive a power loss. The default calls
        :meth:`make_durable` once per path; a local disk overrides it to sync the files in parallel and
        each directory once.
        """
        for path in paths:
            self.make_durable(path)


StorageFactory = Callable[[str], Storage]
"""Builds the storage of a table URI."""

_OBJECT_STORE = "maintd.storage.objectstore:object_store_factory"

BUILTIN_STORAGES: dict[str, str] = {
    "file": "maintd.storage.local:LocalStorage",
    "s3": _OBJECT_STORE,
    "s3a": _OBJECT_STORE,
    "gs": _OBJECT_STORE,
    "az": _OBJECT_STORE,
    "abfs": _OBJECT_STORE,
    "abfss": _OBJECT_STORE,
}
"""maintd's own storages: URI scheme -> ``module:factory``. Each module is imported on the first use of one of its
schemes (a local table needs no object-store client), so this module imports none of them and none registers
itself on import; a new storage is its module and one line here."""

_FACTORIES: dict[str, StorageFactory] = {}
_BUILTIN: dict[str, StorageFactory] = {}


def _load_builtin(scheme: str) -> None:
    """Register maintd's own storage of ``scheme`` (:data:`BUILTIN_STORAGES`), importing its module, the first time
    the scheme is looked up or its registration changed: the built-in storages behave as if registered from the
    start, so a later :func:`register_storage` or :func:`unregister_storage` of the scheme stands."""
    target = BUILTIN_STORAGES.get(scheme)
    if target is None or scheme in _BUILTIN:
        return
    module, _, name = target.partition(":")
    factory: StorageFactory = getattr(importlib.import_module(module), name)
    _BUILTIN[scheme] = factory
    _FACTORIES[scheme] = factory


def register_storage(scheme: str, factory: StorageFactory, *, builtin: bool = False) -> StorageFactory | None:
    """Make ``storage_for_uri`` build the storages of ``scheme`` (``file`` for local paths) with ``factory``.

    Returns the factory it replaces (None if there was none; for a scheme of :data:`BUILTIN_STORAGES`, maintd's own
    factory unless it was replaced or unregistered), so that a wrapper (the fault-injecting storage of the tests)
    can be installed and removed again. ``builtin``: the registration counts as maintd's own
    (:func:`is_builtin_storage`).
    """
    _load_builtin(scheme)
    previous = _FACTORIES.get(scheme)
    _FACTORIES[scheme] = factory
    if builtin:
        _BUILTIN[scheme] = factory
    return previous


def unregister_storage(scheme: str) -> None:
    """Forget the factory of ``scheme``: :func:`storage_for_uri` refuses its URIs until one is registered again."""
    _load_builtin(scheme)
    _FACTORIES.pop(scheme, None)


def is_builtin_storage(uri: str) -> bool:
    """Whether ``uri``'s scheme is served by maintd's own storage, not by one registered in this process only
    (a test's wrapper, an embedding program's scheme): then another process opens the table as this one."""
    scheme = uri_scheme(uri)
    _load_builtin(scheme)
    factory = _FACTORIES.get(scheme)
    return factory is not None and factory is _BUILTIN.get(scheme)


def uri_scheme(uri: str) -> str:
    """``file`` for a local path or ``file://`` URI, else the part before ``://``."""
    return uri.split("://", 1)[0] if "://" in uri else "file"


def storage_for_uri(uri: str) -> Storage:
    """The storage for a table URI, by its scheme (a local path or ``file://`` URI: ``file``).

    Raises:
        UnknownSchemeError: for a scheme no storage is registered for.
    """
    scheme = uri_scheme(uri)
    _load_builtin(scheme)  # only this scheme's module: a local table needs no object-store client
    factory = _FACTORIES.get(scheme)
    if factory is None:
        known = ", ".join(f"{s}://" for s in sorted(_known_schemes()) if s != "file")
        raise UnknownSchemeError(
            f"table URI {uri!r}: no storage for scheme {scheme!r}; use a local path, a file:// URI or one of "
            f"{known} (docs/format.md 'Storage')", uri=uri,
        )
    return factory(uri)


def _known_schemes() -> set[str]:
    """The schemes :func:`storage_for_uri` serves: those registered, and the built-in ones not yet loaded."""
    return set(_FACTORIES) | {s for s in BUILTIN_STORAGES if s not in _BUILTIN}
