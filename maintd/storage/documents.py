"""Whole documents at a URI (a plan, a job's summary): read and written through the storage of any scheme.

A Spark job in cluster mode has a driver on a machine the user never sees, so the plan it executes and the
summary it writes live wherever the user can reach them: ``s3://``, ``gs://``, ``az://``, a ``file://`` URI
or a local path. The document is read and written with the options of the storage layer (registered per
prefix, or the environment's), and a written document appears whole or not at all (``write_atomic``).
"""

from __future__ import annotations

from pathlib import Path

from maintd.errors import InvalidInputError
from maintd.storage.base import Storage, storage_for_uri


def document_location(uri: str) -> tuple[Storage, str]:
    """The storage of the directory holding ``uri`` and the document's name in it."""
    if not isinstance(uri, str) or not uri.strip():
        raise InvalidInputError("a document location must be a path or a URI such as s3://bucket/summary.json")
    if "://" in uri and not uri.startswith("file://"):
        scheme, rest = uri.split("://", 1)
        head, _, name = rest.rpartition("/")
        if not head or not name:
            raise InvalidInputError(f"{uri!r} names no document: give a key inside a bucket or container, such as "
                                    f"{scheme}://bucket/runs/summary.json")
        return storage_for_uri(f"{scheme}://{head}"), name
    path = Path(uri[len("file://"):] if uri.startswith("file://") else uri).expanduser().absolute()
    if uri.endswith("/") or not path.name:
        raise InvalidInputError(f"{uri!r} is a directory; give a file name, such as {uri.rstrip('/')}/summary.json")
    return storage_for_uri(str(path.parent)), path.name


def read_document(uri: str) -> bytes:
    """The bytes of the document at ``uri``; raises ``FileNotFoundError`` naming it when there is none."""
    storage, name = document_location(uri)
    try:
        return storage.read(name)
    except FileNotFoundError:
        raise FileNotFoundError(f"no document at {uri}") from None


def write_document(uri: str, data: bytes) -> None:
    """Write (or replace) the document at ``uri`` whole, creating a local directory it needs."""
    storage, name = document_location(uri)
    if "://" not in storage.uri:  # a local directory (object stores have none to create)
        Path(storage.uri).mkdir(parents=True, exist_ok=True)
    storage.write_atomic(name, data)
