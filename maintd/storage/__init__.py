"""Storage: moves bytes for a table and offers the one primitive commits need, put-if-absent.

Storages are unaware of each other and of the table format. Add an object store by
implementing :class:`Storage` (S3 ``If-None-Match: *``, GCS ``ifGenerationMatch=0`` and Azure
``If-None-Match: *`` give put-if-absent natively).
"""

from maintd.storage.base import FileInfo, Storage, storage_for_uri
from maintd.storage.local import LocalStorage

__all__ = ["FileInfo", "LocalStorage", "Storage", "storage_for_uri"]
