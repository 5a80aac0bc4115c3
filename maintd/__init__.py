"""maintd: table maintenance for primary-key delta tables (clustering, compaction, reclamation).

The public API is what ``__all__`` lists; everything else is internal and may change.
"""

from typing import TYPE_CHECKING, Any

from maintd.errors import (
    CommitConflictError,
    CommitError,
    CommitRetriesExhaustedError,
    CommitStateUnknownError,
    ConcurrentAppendError,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteReadError,
    ConcurrentTransactionError,
    ConfigError,
    ConfirmationRequiredError,
    CorruptLogError,
    CorruptTableError,
    DataFileError,
    DataFileMissingError,
    DataFileSchemaError,
    InvalidInputError,
    InvalidPropertyError,
    MaintdError,
    MetadataChangedError,
    PathOutsideTableError,
    PinConflictError,
    PolicyError,
    PrimaryKeyError,
    ProtocolChangedError,
    SchemaEvolutionError,
    SchemaMismatchError,
    StateStoreError,
    StorageError,
    TableExistsError,
    TableNotFoundError,
    TaskExecutionError,
    UnsupportedProtocolError,
    VersionNotFoundError,
)

if TYPE_CHECKING:
    from maintd.api import Table
    from maintd.table import CommitRecord, DataFileInfo, Pin, RetryPolicy, Snapshot, Transaction

__version__ = "0.1.0"

_LAZY = {"CommitRecord", "DataFileInfo", "Pin", "RetryPolicy", "Snapshot", "Transaction"}
"""Imported on first use: the table format pulls in pyarrow, which commands such as ``maintd --help`` never
need (see ``tests/cli/test_startup.py``)."""


def __getattr__(name: str) -> Any:
    value: Any
    if name == "Table":  # the table with maintenance (maintd.api), one layer above the format's
        import maintd.api

        value = maintd.api.Table
    elif name in _LAZY:
        import maintd.table

        value = getattr(maintd.table, name)
    else:
        raise AttributeError(f"module 'maintd' has no attribute {name!r}")
    globals()[name] = value
    return value


__all__ = [
    "CommitConflictError",
    "CommitError",
    "CommitRecord",
    "CommitRetriesExhaustedError",
    "CommitStateUnknownError",
    "ConcurrentAppendError",
    "ConcurrentDeleteDeleteError",
    "ConcurrentDeleteReadError",
    "ConcurrentTransactionError",
    "ConfigError",
    "ConfirmationRequiredError",
    "CorruptLogError",
    "CorruptTableError",
    "DataFileError",
    "DataFileInfo",
    "DataFileMissingError",
    "DataFileSchemaError",
    "InvalidInputError",
    "InvalidPropertyError",
    "MaintdError",
    "MetadataChangedError",
    "PathOutsideTableError",
    "Pin",
    "PinConflictError",
    "PolicyError",
    "PrimaryKeyError",
    "ProtocolChangedError",
    "RetryPolicy",
    "SchemaEvolutionError",
    "SchemaMismatchError",
    "Snapshot",
    "StateStoreError",
    "StorageError",
    "Table",
    "TableExistsError",
    "TableNotFoundError",
    "TaskExecutionError",
    "Transaction",
    "UnsupportedProtocolError",
    "VersionNotFoundError",
    "__version__",
]
