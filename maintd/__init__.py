"""maintd: table maintenance for primary-key delta tables (clustering, compaction, reclamation).

The public API is what ``__all__`` lists; everything else is internal and may change.
"""

from maintd.errors import (
    CommitConflictError,
    CommitError,
    CommitRetriesExhaustedError,
    ConcurrentAppendError,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteReadError,
    ConcurrentTransactionError,
    ConfigError,
    ConfirmationRequiredError,
    CorruptLogError,
    InvalidInputError,
    InvalidPropertyError,
    MaintdError,
    MetadataChangedError,
    PolicyError,
    PrimaryKeyError,
    ProtocolChangedError,
    SchemaMismatchError,
    StateStoreError,
    StorageError,
    TableExistsError,
    TableNotFoundError,
    TaskExecutionError,
    VersionNotFoundError,
)
from maintd.table import CommitRecord, RetryPolicy, Snapshot, Table, Transaction

__version__ = "0.1.0"

__all__ = [
    "CommitConflictError",
    "CommitError",
    "CommitRecord",
    "CommitRetriesExhaustedError",
    "ConcurrentAppendError",
    "ConcurrentDeleteDeleteError",
    "ConcurrentDeleteReadError",
    "ConcurrentTransactionError",
    "ConfigError",
    "ConfirmationRequiredError",
    "CorruptLogError",
    "InvalidInputError",
    "InvalidPropertyError",
    "MaintdError",
    "MetadataChangedError",
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
    "VersionNotFoundError",
    "__version__",
]
