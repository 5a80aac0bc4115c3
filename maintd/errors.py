"""The one exception tree of maintd.

Every error maintd raises derives from :class:`MaintdError`. Each class says whether retrying
the same call can help (``retryable``), so callers (the daemon, a writer's own loop) decide
without parsing messages::

    MaintdError
    ├── InvalidInputError              bad argument, data, schema, key or property (not retryable)
    │   ├── SchemaMismatchError        data does not match the table schema
    │   ├── PrimaryKeyError            missing or null primary key values
    │   └── InvalidPropertyError       unknown property key or value out of range
    ├── TableNotFoundError             no table at the URI
    ├── TableExistsError               Table.create on an existing table
    ├── VersionNotFoundError           version expired by retention or never written
    ├── CorruptLogError                a log entry or checkpoint cannot be parsed
    ├── StorageError                   the storage failed (retryable)
    ├── CommitError                    a commit did not land
    │   ├── CommitRetriesExhaustedError  lost the race too often (retryable later)
    │   └── CommitConflictError        a concurrent commit makes ours invalid (re-plan, then retry)
    │       ├── ProtocolChangedError
    │       ├── MetadataChangedError
    │       ├── ConcurrentTransactionError
    │       ├── ConcurrentAppendError
    │       ├── ConcurrentDeleteReadError
    │       └── ConcurrentDeleteDeleteError
    ├── PolicyError                    a maintenance policy file is invalid
    ├── ConfigError                    the settings are invalid
    ├── TaskExecutionError             a maintenance task failed while rewriting files
    ├── SparkDriverLostError           the Spark driver's JVM is gone (the daemon fails its liveness)
    ├── StateStoreError                the daemon's state store failed
    │   └── LeaseLostError             the daemon no longer holds a table's lease (another may take it)
    └── ConfirmationRequiredError      a destructive command ran without confirmation
"""

from __future__ import annotations


class MaintdError(Exception):
    """Root of every error maintd raises."""

    retryable: bool = False


class InvalidInputError(MaintdError, ValueError):
    """An argument, data set, schema or property value is wrong; fix the input and call again."""


class SchemaMismatchError(InvalidInputError):
    """The data given to a writer does not match the table schema."""


class PrimaryKeyError(InvalidInputError):
    """Primary key columns are missing from the data or hold nulls."""


class InvalidPropertyError(InvalidInputError):
    """A table property is unknown or its value is out of range."""


class TableNotFoundError(MaintdError):
    """There is no table (no ``_log/``) at the given URI."""


class TableExistsError(MaintdError):
    """``Table.create`` was called on a URI that already holds a table."""


class VersionNotFoundError(MaintdError):
    """The requested version was never written, or has been expired by retention."""

    def __init__(self, message: str, *, oldest_retained: int | None = None, latest: int | None = None):
        super().__init__(message)
        self.oldest_retained = oldest_retained
        self.latest = latest


class CorruptLogError(MaintdError):
    """A log entry or checkpoint cannot be parsed; the table needs repair (see docs/operations.md)."""


class StorageError(MaintdError):
    """The underlying storage failed; retrying may help."""

    retryable = True


class CommitError(MaintdError):
    """A commit did not land."""


class CommitRetriesExhaustedError(CommitError):
    """The commit lost the race for a version more often than the retry policy allows."""

    retryable = True


class CommitConflictError(CommitError):
    """A concurrent commit conflicts with this transaction; it did not land.

    Attributes:
        version: the winning version that conflicts.
        winning_operation: the operation that committed it.
        paths: the data files (or application ids) the two commits clash on, sorted; empty when
            the conflict is about the table as a whole (protocol, metadata).
    """

    def __init__(self, message: str, *, version: int | None = None, winning_operation: str | None = None,
                 paths: tuple[str, ...] = ()):
        super().__init__(message)
        self.version = version
        self.winning_operation = winning_operation
        self.paths = paths


class ProtocolChangedError(CommitConflictError):
    """A concurrent commit changed the table protocol."""


class MetadataChangedError(CommitConflictError):
    """A concurrent commit changed the schema, partitioning or properties."""


class ConcurrentTransactionError(CommitConflictError):
    """A concurrent commit carried the same application transaction id."""


class ConcurrentAppendError(CommitConflictError):
    """A concurrent commit added files where this transaction read."""


class ConcurrentDeleteReadError(CommitConflictError):
    """A concurrent commit removed files this transaction read."""


class ConcurrentDeleteDeleteError(CommitConflictError):
    """A concurrent commit removed files this transaction also removes."""


class PolicyError(MaintdError):
    """A maintenance policy is invalid; the message names the file, the key and the rule."""


class ConfigError(MaintdError):
    """The daemon or CLI settings are invalid."""


class TaskExecutionError(MaintdError):
    """A maintenance task failed while rewriting files; nothing of it was committed."""

    retryable = True


class SparkDriverLostError(MaintdError):
    """The Spark driver's JVM exited or stopped answering; the SparkSession cannot be used any more."""


class StateStoreError(MaintdError):
    """The state store (SQLite or PostgreSQL) failed."""

    retryable = True


class LeaseLostError(StateStoreError):
    """The daemon lost a table's lease (expired, or released on shutdown); its run must not commit."""

    retryable = True


class ConfirmationRequiredError(MaintdError):
    """A destructive operation was asked for without confirmation (``--yes``)."""


__all__ = [
    "CommitConflictError",
    "CommitError",
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
    "LeaseLostError",
    "MaintdError",
    "MetadataChangedError",
    "PolicyError",
    "PrimaryKeyError",
    "ProtocolChangedError",
    "SchemaMismatchError",
    "SparkDriverLostError",
    "StateStoreError",
    "StorageError",
    "TableExistsError",
    "TableNotFoundError",
    "TaskExecutionError",
    "VersionNotFoundError",
]
