"""Storage: moves bytes for a table and offers the one primitive commits need, put-if-absent.

Storages are unaware of each other and of the table format; each registers itself for a URI scheme
(:func:`register_storage`). Add an object store by implementing :class:`Storage` (S3
``If-None-Match: *``, GCS ``ifGenerationMatch=0`` and Azure ``If-None-Match: *`` give put-if-absent
natively). :mod:`maintd.storage.faulty` wraps any storage with injected failures, delays, ambiguous
results and crashes, for tests.
"""

from maintd.storage.base import (
    FileInfo,
    Storage,
    StorageFactory,
    check_path,
    register_storage,
    storage_for_uri,
    unregister_storage,
)
from maintd.storage.local import LocalStorage

__all__ = ["FileInfo", "LocalStorage", "Storage", "StorageFactory", "check_path", "register_storage",
           "storage_for_uri", "unregister_storage"]
