"""The one exception tree of maintd.

Every error maintd raises derives from :class:`MaintdError`. Each class says whether retrying
the same call can help (``retryable``), so callers (the daemon, a writer's own loop) decide
without parsing messages::

    MaintdError
    ├── InvalidInputError              bad argument, data, schema, key or property (not retryable)
    │   ├── SchemaMismatchError        data does not match the table schema
    │   │   └── SchemaEvolutionError   a schema change maintd does not allow (drop, rename, type, key, NOT NULL)
    │   ├── PrimaryKeyError            missing or null primary key values
    │   ├── InvalidPropertyError       unknown property key or value out of range
    │   ├── PathOutsideTableError      a path that is absolute, not normalised, or leaves the table root
    │   └── StorageConfigError         a table URI or its storage options are wrong (names the URI, what to set)
    │       ├── UnknownSchemeError     no storage for the URI's scheme
    │       ├── StorageCredentialsError  no credentials found, or the store refused them
    │       ├── BucketNotFoundError    the bucket (container) does not exist
    │       ├── StoragePermissionError  the storage refused a write (read-only directory or mount): nothing written
    │       ├── ConditionalPutUnsupportedError  the store cannot put-if-absent (and no commit lock is configured)
    │       └── ForkedProcessError     a GCS or Azure table in a process forked after object-store requests began
    ├── TableNotFoundError             no table at the URI
    ├── TableExistsError               Table.create on an existing table
    ├── VersionNotFoundError           version expired by retention or never written
    ├── CorruptTableError              the table on storage is damaged: skipped, nothing in it is deleted
    │   ├── CorruptLogError            a commit or checkpoint fails its check or cannot be parsed (names file, version)
    │   └── DataFileError              a data file the log references is unusable (names the file)
    │       ├── DataFileMissingError   it is not on storage
    │       └── DataFileSchemaError    it is not Parquet, or its columns differ from the table's
    ├── UnsupportedProtocolError       the table needs a newer maintd to read or write it (names both versions)
    ├── StorageError                   the storage failed (retryable)
    │   └── StorageUnreachableError    the store's endpoint cannot be reached (names the URI and the endpoint)
    ├── CommitError                    a commit failed: it did not land, or its outcome is unknown
    │   ├── CommitStateUnknownError    the outcome cannot be known: files kept, nothing retried (check history)
    │   ├── CommitRetriesExhaustedError  lost the race too often; did not land (retryable later)
    │   └── CommitConflictError        a concurrent commit makes ours invalid; did not land (re-plan, then retry)
    │       ├── ProtocolChangedError
    │       ├── MetadataChangedError
    │       ├── ConcurrentTransactionError
    │       ├── ConcurrentAppendError
    │       ├── ConcurrentDeleteReadError
    │       ├── ConcurrentDeleteDeleteError
    │       ├── PinConflictError   a pin and a reclamation that expires the pinned version raced
    │       └── TableReplacedError  the table was dropped and re-created, or rolled back, under the commit
    ├── PolicyError                    a maintenance policy file is invalid
    ├── TuningError                    the daemon could not re-tune a table to its targets (recorded; knobs kept)
    ├── ConfigError                    the settings are invalid
    ├── TaskExecutionError             a maintenance task failed while rewriting files
    ├── SparkDriverLostError           the Spark driver's JVM is gone (the daemon fails its liveness)
    ├── StateStoreError                the daemon's state store failed
    │   ├── LeaseLostError             the daemon no longer holds a table's lease (another may take it)
    │   └── StateStoreSchemaError      the store's schema is not this maintd's (upgrade it, or run the newer one)
    └── ConfirmationRequiredError      a destructive command ran without confirmation
"""

from __future__ import annotations


class MaintdError(Exception):
    """Root of every error maintd raises. Its message is redacted when it is made
    (:func:`maintd.redaction.redact_secrets`): no error of maintd's ever carries a secret, whoever prints it."""

    retryable: bool = False

    def __init__(self, *args: object) -> None:
        if args and isinstance(args[0], str):
            from maintd.redaction import redact_secrets

            args = (redact_secrets(args[0]), *args[1:])
        super().__init__(*args)


class InvalidInputError(MaintdError, ValueError):
    """An argument, data set, schema or property value is wrong; fix the input and call again."""


class SchemaMismatchError(InvalidInputError):
    """The data given to a writer does not match the table schema."""


class SchemaEvolutionError(SchemaMismatchError):
    """A change of the table schema that maintd does not allow: only nullable value columns can be added
    (docs/format.md, "Schema evolution"). The message names the column and what to do instead."""


class PrimaryKeyError(InvalidInputError):
    """Primary key columns are missing from the data or hold nulls."""


class InvalidPropertyError(InvalidInputError):
    """A table property is unknown or its value is out of range."""


class StorageConfigError(InvalidInputError):
    """A table URI or the storage options it is opened with are wrong: the message names the URI and the
    option or environment variable to set. Retrying the same call cannot help.

    Attributes:
        uri: the table URI.
    """

    def __init__(self, message: str, *, uri: str | None = None):
        super().__init__(message)
        self.uri = uri


class UnknownSchemeError(StorageConfigError):
    """No storage is registered for the scheme of a table URI."""


class StorageCredentialsError(StorageConfigError):
    """No credentials were found for an object store, or the store refused the ones given."""


class BucketNotFoundError(StorageConfigError):
    """The bucket (GCS bucket, Azure container) a table URI names does not exist."""


class StoragePermissionError(StorageConfigError):
    """The storage refused an operation for lack of permission (a read-only directory or mount, a user without
    write access). It is certain that nothing was written, so nothing retries it: the message names the path.

    Attributes:
        uri: the table URI.
        path: the path that was refused.
    """

    def __init__(self, message: str, *, uri: str | None = None, path: str | None = None):
        super().__init__(message, uri=uri)
        self.path = path


class ConditionalPutUnsupportedError(StorageConfigError):
    """The store does not honour conditional put (``If-None-Match: *``), so commits could overwrite each other;
    refused unless the user opts into a commit lock held in the state store (``commit_lock: state_store``)."""


class ForkedProcessError(StorageConfigError):
    """A GCS or Azure table used in a process forked after the process it was forked from had used an object
    store: the object-store client's runtime does not survive ``fork`` (S3 tables switch to a client that does).
    Start such processes with the ``spawn`` or ``forkserver`` method, or open the table only in the child."""


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


class PathOutsideTableError(InvalidInputError):
    """A path given to a storage is absolute, not normalised (``.``, ``..``, empty segments) or resolves
    outside the table root; no storage ever reads, writes or deletes such a path."""


class CorruptTableError(MaintdError):
    """The table on storage is damaged (its log or a data file). Maintenance and reclamation skip the
    table and delete nothing in it; the message names the file and what to do (docs/operations.md, "Recover").

    Attributes:
        path: the damaged file, relative to the table root (None when the message names several).
    """

    def __init__(self, message: str, *, path: str | None = None):
        super().__init__(message)
        self.path = path


class CorruptLogError(CorruptTableError):
    """A commit or checkpoint fails its self-check or cannot be parsed; the table needs repair.

    Attributes:
        path: the log file, relative to the table root.
        version: the version that file holds (None when not known).
    """

    def __init__(self, message: str, *, path: str | None = None, version: int | None = None):
        super().__init__(message, path=path)
        self.version = version


class DataFileError(CorruptTableError):
    """A data file that the log references cannot be used."""


class DataFileMissingError(DataFileError):
    """A data file that the log references is not on storage."""


class DataFileSchemaError(DataFileError):
    """A data file is not readable Parquet, or its columns or types differ from what the table's schema says."""


class UnsupportedProtocolError(MaintdError):
    """The table's protocol asks for a newer reader or writer than this maintd, or names features it does not
    know; upgrade maintd.

    Attributes:
        required: the version (or commit file or checkpoint format) the table requires.
        supported: the newest version (or format) this maintd implements.
        features: the table's features this maintd does not know, by name (empty when refused by number).
    """

    def __init__(self, message: str, *, required: int, supported: int, features: tuple[str, ...] = ()):
        super().__init__(message)
        self.required = required
        self.supported = supported
        self.features = tuple(features)


class StorageError(MaintdError):
    """The underlying storage failed; retrying may help."""

    retryable = True


class StorageUnreachableError(StorageError):
    """The store's endpoint cannot be reached (connection refused, DNS, timeout); retrying later may help.

    Attributes:
        uri: the table URI.
    """

    def __init__(self, message: str, *, uri: str | None = None):
        super().__init__(message)
        self.uri = uri


class CommitError(MaintdError):
    """A commit failed. Every subclass but :class:`CommitStateUnknownError` means it certainly did not land."""


class CommitStateUnknownError(CommitError):
    """Whether the commit landed cannot be known (the storage failed while publishing it and kept failing).

    Nothing is deleted: the commit's data files stay, and orphan cleanup takes them after its grace if the
    commit did not land. Retrying blindly may apply the change twice; look for ``txn_id`` in the table's
    history first (writers with ``app_id``/``app_version`` can simply retry: a landed version is skipped).

    Attributes:
        version: the version the commit was published at.
        txn_id: the transaction id to look for in ``Table.history()``.
    """

    def __init__(self, message: str, *, version: int, txn_id: str):
        super().__init__(message)
        self.version = version
        self.txn_id = txn_id


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


class PinConflictError(CommitConflictError):
    """A pin of a version and a reclamation (or PURGE) expiring that version raced: the one that landed
    first wins. A pin that lost names the oldest version still retained; a reclamation that lost plans again.
    """


class TableReplacedError(CommitConflictError):
    """The table this transaction read was dropped and re-created (another table id) or rolled back (its latest
    version is older than the one the transaction built on) while it committed; nothing landed. Read the table
    again and decide whether the change still applies to it."""


class PolicyError(MaintdError):
    """A maintenance policy is invalid; the message names the file, the key and the rule."""


class TuningError(MaintdError):
    """A re-tune of a table to its targets failed (no tuner, or the tuner failed); the knobs applied before
    stay, and the next re-tune tries again."""


class ConfigError(MaintdError):
    """The daemon or CLI settings are invalid."""


class TaskExecutionError(MaintdError):
    """A maintenance task failed while rewriting files; nothing of it was committed.

    Attributes:
        summary: the run's summary when a whole run failed (``maintd.Table.maintain``): what did commit.
    """

    retryable = True

    def __init__(self, *args: object, summary: object = None) -> None:
        super().__init__(*args)
        self.summary = summary


class SparkDriverLostError(MaintdError):
    """The Spark driver's JVM exited or stopped answering; the SparkSession cannot be used any more."""


class StateStoreError(MaintdError):
    """The state store (SQLite or PostgreSQL) failed."""

    retryable = True


class LeaseLostError(StateStoreError):
    """The daemon lost a table's lease (expired, or released on shutdown); its run must not commit."""

    retryable = True


class StateStoreSchemaError(StateStoreError):
    """The state store answers, but its schema is not this maintd's: empty, older (``maintd store upgrade``) or
    migrated by a newer maintd. The operator must act; retrying changes nothing."""

    retryable = False


class ConfirmationRequiredError(MaintdError):
    """A destructive operation was asked for without confirmation (``--yes``)."""


__all__ = [
    "BucketNotFoundError",
    "CommitConflictError",
    "CommitError",
    "CommitRetriesExhaustedError",
    "CommitStateUnknownError",
    "ConcurrentAppendError",
    "ConcurrentDeleteDeleteError",
    "ConcurrentDeleteReadError",
    "ConcurrentTransactionError",
    "ConditionalPutUnsupportedError",
    "ConfigError",
    "ConfirmationRequiredError",
    "CorruptLogError",
    "CorruptTableError",
    "DataFileError",
    "DataFileMissingError",
    "DataFileSchemaError",
    "ForkedProcessError",
    "InvalidInputError",
    "InvalidPropertyError",
    "LeaseLostError",
    "MaintdError",
    "MetadataChangedError",
    "PathOutsideTableError",
    "PolicyError",
    "PrimaryKeyError",
    "ProtocolChangedError",
    "SchemaEvolutionError",
    "SchemaMismatchError",
    "SparkDriverLostError",
    "StateStoreError",
    "StateStoreSchemaError",
    "StorageConfigError",
    "StorageCredentialsError",
    "StorageError",
    "StoragePermissionError",
    "StorageUnreachableError",
    "TableExistsError",
    "TableNotFoundError",
    "TableReplacedError",
    "TaskExecutionError",
    "TuningError",
    "UnknownSchemeError",
    "UnsupportedProtocolError",
    "VersionNotFoundError",
]
