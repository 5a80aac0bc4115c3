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
    from maintd.table import CommitRecord, Pin, RetryPolicy, Snapshot, Table, Transaction

__version__ = "0.1.0"

_LAZY = {"CommitRecord", "Pin", "RetryPolicy", "Snapshot", "Table", "Transaction"}
"""Imported on first use: the table format pulls in pyarrow, which commands such as ``maintd --help`` never
need (see ``tests/cli/test_startup.py``)."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import maintd.table

        value = getattr(maintd.table, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'maintd' has no attribute {name!r}")

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
