"""The storage interface every table location implements."""

from __future__ import annotations

import abc
from dataclasses import dataclass

import pyarrow.fs as pafs


@dataclass(frozen=True, slots=True)
class FileInfo:
    """A file below the table root: path relative to the root, size in bytes, mtime in ms."""

    path: str
    size: int
    mtime_ms: int


class Storage(abc.ABC):
    """Byte-level access to one table location. Paths are relative to the table root, '/'-separated."""

    #: True when :meth:`list_dir` returns names in lexical order (object stores), so that the
    #: newest commit is the first entry; False for local filesystems (unordered listing).
    lists_in_order: bool = False

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
        """The path of ``path`` as understood by :attr:`filesystem`."""

    @abc.abstractmethod
    def put_if_absent(self, path: str, data: bytes) -> bool:
        """Publish ``data`` at ``path`` atomically unless a file is there already.

        Returns True if this call created the file, False if it existed. Readers never see a
        partially written file.
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

    @abc.abstractmethod
    def walk(self, path: str = "") -> list[FileInfo]:
        """Every file below ``path``, recursively."""

    @abc.abstractmethod
    def delete(self, path: str) -> bool:
        """Delete ``path``; returns False if it was already gone (idempotent)."""

    @abc.abstractmethod
    def makedirs(self, path: str) -> None:
        """Create directory ``path`` and its parents (no-op on object stores)."""


def storage_for_uri(uri: str) -> Storage:
    """The storage for a table URI: a local path or ``file://`` URI.

    Raises:
        InvalidInputError: for a scheme maintd has no put-if-absent storage for yet.
    """
    from maintd.errors import InvalidInputError
    from maintd.storage.local import LocalStorage

    if "://" not in uri or uri.startswith("file://"):
        return LocalStorage(uri)
    scheme = uri.split("://", 1)[0]
    raise InvalidInputError(
        f"table URI {uri!r}: no storage for scheme {scheme!r}; use a local path or file:// URI "
        "(object stores need a put-if-absent storage, see docs/format.md 'Storage')"
    )
