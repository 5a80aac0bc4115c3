"""The stores a table lives on in the tests: local disk, S3 (the moto server) and Azure Blob Storage (Azurite).

A test that takes the ``table_store`` fixture (tests/conftest.py) runs once per store, with ids ``[local]``,
``[s3]`` and ``[azure]``; ``@pytest.mark.stores("s3", "azure")`` limits it to some of them, and
``pytest --store s3`` runs only the S3 variants of such tests (tests without the fixture run as usual).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

STORES = ("local", "s3", "azure")
"""Every store a ``table_store`` test runs on, in this order."""
OBJECT_STORES = ("s3", "azure")


@dataclass(frozen=True)
class TableStore:
    """A fresh place for tables on one store, its storage options already registered in this process.

    ``root`` is a directory (local), ``s3://BUCKET`` or ``az://CONTAINER``: tables go below it
    (``f"{store.root}/t"``). ``options`` are the storage options registered for ``root`` and ``env`` the standard
    environment reaching the store from another process (both empty on local disk). ``secret`` is the credential no
    output may show (None on local disk); ``server`` the :class:`~s3server.S3Server` or
    :class:`~azureserver.AzureServer` (None on local disk).
    """

    name: str
    root: str
    options: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    secret: str | None = None
    server: Any = None
