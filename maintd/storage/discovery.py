"""Finding tables below a warehouse root on any storage: the directories that hold ``_log/``."""

from __future__ import annotations

from maintd.storage.base import storage_for_uri

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


__all__ = ["find_tables"]
