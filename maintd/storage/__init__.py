"""Storage: moves bytes for a table and offers the one primitive commits need, put-if-absent.

Storages are unaware of each other and of the table format. :func:`storage_for_uri` picks one by URI scheme
(:data:`maintd.storage.base.BUILTIN_STORAGES`, each storage's module imported on the first use of its scheme):
local paths (:mod:`maintd.storage.local`), and S3 (``s3://``, ``s3a://``), GCS (``gs://``) and Azure (``az://``,
``abfss://``) through obstore (:mod:`maintd.storage.objectstore`), whose conditional put (S3 and Azure
``If-None-Match: *``, GCS ``ifGenerationMatch=0``) is put-if-absent. :func:`register_storage` adds a scheme or
replaces a storage in this process.
:func:`configure_storage` registers the options (endpoint, credentials) of the tables below a URI prefix.
:mod:`maintd.storage.faulty` wraps any storage with injected failures, delays, ambiguous
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
from maintd.storage.lock import Claim, CommitRecords, commit_lock, install_commit_lock
from maintd.storage.options import (
    SHIP_CONF,
    CarriedStorage,
    StorageOptions,
    carry_storage,
    clear_storage_options,
    configure_storage,
    executor_storage,
    resolve_options,
)

__all__ = ["SHIP_CONF", "CarriedStorage", "Claim", "CommitRecords", "FileInfo", "LocalStorage", "Storage",
           "StorageFactory", "StorageOptions", "carry_storage", "check_path", "clear_storage_options", "commit_lock",
           "configure_storage", "executor_storage", "install_commit_lock", "register_storage", "resolve_options",
           "storage_for_uri", "unregister_storage"]
