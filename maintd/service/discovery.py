"""Discovery of tables under the warehouse roots, on local disks and object stores alike.

A table is a directory (an object-store prefix) holding ``_log/``; below a table nothing is searched.
On an object store every level is one delimited LIST (``list_subdirs``: the common prefixes of a
prefix), so the cost grows with the number of directories searched, not with the number of data files
in the tables; ``discovery_max_depth`` bounds it, and names starting with ``.`` or ``_`` are skipped.

A root that cannot be searched is not skipped in silence: its :class:`RootScan` carries one error that
names the root and what to set (a missing bucket, refused or missing credentials, an unreachable
endpoint, a local path that is not a directory). The daemon records it in the state store, serves it
in ``/metrics`` (``maintd_root_healthy``) and ``maintd status``, and goes on with the other roots.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loguru import logger

from maintd.errors import MaintdError
from maintd.redaction import redact_secrets

LOG_DIR = "_log"

@dataclass(frozen=True)
class RootScan:
    """What one search of a warehouse root found: its tables, or why it could not be searched."""

    root: str
    tables: tuple[str, ...] = ()
    error: str | None = None
    error_type: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def is_object_store(uri: str) -> bool:
    return "://" in uri and not uri.startswith("file://")


def scan_root(root: str, max_depth: int = 4) -> RootScan:
    """Search ``root`` for tables down to ``max_depth`` levels; never raises for a root that cannot be read."""
    try:
        tables = _scan_store(root, max_depth) if is_object_store(root) else _scan_local(root, max_depth)
    except MaintdError as exc:
        return _failed(root, exc)
    except OSError as exc:
        return _failed(root, exc)
    return RootScan(root, tuple(tables))


def discover(roots: list[str], max_depth: int = 4) -> list[RootScan]:
    """One :class:`RootScan` per root, in order; a failing root is logged once per search, as an error."""
    scans = []
    for root in dict.fromkeys(roots):
        scan = scan_root(root, max_depth)
        if scan.error:
            logger.error("{}", scan.error)
        scans.append(scan)
    return scans


def tables_of(scans: list[RootScan]) -> list[str]:
    """Every table the scans found, without repeats, in order."""
    return list(dict.fromkeys(t for scan in scans for t in scan.tables))


def warehouse_tables(settings: Any) -> tuple[list[str], list[RootScan]]:
    """The tables of the settings' warehouse (``maintd run``, ``maintd gc``): the configured ones, then those
    found under the roots (when discovery is on), without repeats; and the roots that failed their search."""
    wh = settings.warehouse
    scans = discover(list(wh.roots), wh.discovery_max_depth) if wh.discovery else []
    uris = list(dict.fromkeys([*wh.tables, *tables_of(scans)]))
    return uris, [scan for scan in scans if not scan.ok]


def _failed(root: str, exc: BaseException) -> RootScan:
    text = str(exc) if not isinstance(exc, OSError) or not exc.strerror else exc.strerror
    for prefix in (f"table {root}: ", f"table {root.rstrip('/')}: "):
        text = text.removeprefix(prefix)  # the storage names the URI; the root's message names it once
    hint = "" if " set " in text or "check " in text or "create " in text else (
        "; fix warehouse.roots, or the storage options of the root (warehouse.storage_options, docs/operations.md)")
    message = redact_secrets(f"warehouse root {root} cannot be searched for tables: {text}{hint}")
    return RootScan(root, error=message, error_type=type(exc).__name__)


def _scan_local(root: str, max_depth: int) -> list[str]:
    base = Path(root.removeprefix("file://")).expanduser()
    if not base.is_dir():
        what = "does not exist" if not base.exists() else "is not a directory"
        raise NotADirectoryError(
            0, f"{base} {what}; create it, mount it, or fix warehouse.roots"
        )
    found: list[str] = []
    for dirpath, dirnames, _ in os.walk(base):
        depth = len(Path(dirpath).relative_to(base).parts)
        if LOG_DIR in dirnames:
            found.append(str(Path(dirpath)))
            dirnames.clear()
        elif depth >= max_depth:
            dirnames.clear()
        else:
            dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "_")))
    return found


def _scan_store(root: str, max_depth: int) -> list[str]:
    from maintd.storage.discovery import find_tables

    base = root.rstrip("/")
    found = find_tables(root, max_depth)  # the first listing fails for the whole root (bucket, credentials)
    # Keep the root's own spelling (s3a://...), so that a table is registered once under the URI its root names.
    return [base + uri[len(base):] if uri.startswith(base) else uri for uri in found]


__all__ = ["RootScan", "discover", "is_object_store", "scan_root", "tables_of", "warehouse_tables"]
