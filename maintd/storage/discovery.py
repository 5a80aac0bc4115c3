"""Finding tables on any storage: the directories that hold ``_log/``, below a warehouse root or above a location."""

from __future__ import annotations

from pathlib import Path

from maintd.errors import StorageCredentialsError
from maintd.storage.base import Storage, storage_for_uri, uri_scheme

LOG_DIR = "_log"


def find_tables(root: str, max_depth: int = 4) -> list[str]:
    """The URIs of the tables below ``root`` (``s3://bucket/warehouse``...), searched ``max_depth`` levels deep.

    On an object store a level is one delimiter LIST per "directory" (its common prefixes), so the cost is
    the number of directories above the tables, never the number of data files in them: the search stops
    at a directory holding ``_log/`` and skips names starting with ``.`` or ``_``.
    """
    storage = storage_for_uri(root)
    base = storage.uri.rstrip("/")
    found: list[str] = []
    level = [""]
    for depth in range(max_depth + 1):
        below: list[str] = []
        for path in level:
            subdirs = storage.list_subdirs(path)
            if LOG_DIR in subdirs:
                found.append(f"{base}/{path}" if path else base)
                continue
            if depth < max_depth:
                below += [f"{path}/{d}" if path else d for d in subdirs if not d.startswith((".", "_"))]
        level = below
    return sorted(found)


def parent_uris(uri: str) -> list[str]:
    """The locations that enclose ``uri``, nearest first: parent directories of a local path (up to ``/``), or the
    prefixes of an object-store URI up to its bucket."""
    if uri_scheme(uri) == "file":
        local = Path(uri[len("file://"):] if uri.startswith("file://") else uri).expanduser().absolute()
        return [str(p) for p in local.parents]
    scheme, rest = uri.rstrip("/").split("://", 1)
    netloc, _, path = rest.partition("/")
    parts = [p for p in path.split("/") if p]
    return [f"{scheme}://{netloc}/{'/'.join(parts[:i])}".rstrip("/") for i in range(len(parts) - 1, -1, -1)]


def enclosing_table(storage: Storage) -> str | None:
    """The nearest location above ``storage``'s that holds a table (a ``_log/`` with a file in it), or None.

    Each location is opened with ``storage``'s options. One that these credentials may not list (a role limited
    to the table's prefix) cannot be a table this one could be written into by the same user: it is passed over.
    """
    for parent in parent_uris(storage.uri):
        try:
            if storage.at(parent).list_first(LOG_DIR, 1):
                return parent
        except (StorageCredentialsError, PermissionError):
            continue
    return None


__all__ = ["enclosing_table", "find_tables", "parent_uris"]
