"""Log actions: the typed, frozen records a commit file is made of (docs/format.md, "The log").

Each line of a commit file is one JSON object with exactly one key naming the action
(``{"add": {...}}``). Models are frozen and reject unknown fields, so a log written by a
newer, incompatible writer fails loudly instead of being half understood. The path of every
``add`` and ``remove`` must be a normalised relative path inside the table and outside ``_log/``
(:func:`check_log_path`): a log entry can never make a reader read, or reclamation delete, any
other file.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from maintd.storage import check_path

KeyValue = int | float | str | bool | None
"""One primary-key column value as stored in ``key_min``/``key_max`` (JSON scalar)."""

FileKind = Literal["delta", "base"]
IsolationLevel = Literal["WriteSerializable", "Serializable"]
FEATURES_VERSION = 7
"""The table-features protocol: reader and writer version 7, whose ``protocol`` action lists the table's named
features (:mod:`maintd.table.log.features`, docs/format.md "Table features") instead of implying a bundle by
its number."""
READER_VERSION = FEATURES_VERSION
"""The newest reader protocol this code implements: the legacy versions 1 to 6 (2: self-verifying commit files;
3: pins; 4: prior-row files; 5: looked-up prior-row files; 6: schema evolution) and 7, named table features."""
WRITER_VERSION = FEATURES_VERSION
"""The newest writer protocol this code implements (as :data:`READER_VERSION`; 2 also records transactions in
checkpoints)."""
BASE_VERSION = 2
"""The protocol tables are created at unless asked for named features: readable by every maintd since commit
files verify themselves."""
LOG_DIR_PREFIX = "_log/"


def check_log_path(path: str) -> str:
    """A data-file path as the log may hold it: normalised, relative, inside the table, not in ``_log/``.

    Raises:
        ValueError: (a :class:`~maintd.errors.PathOutsideTableError`) naming the path.
    """
    check_path(path)
    if path == LOG_DIR_PREFIX[:-1] or path.startswith(LOG_DIR_PREFIX):
        raise ValueError(f"path {path!r} is inside _log/: a data file never is")
    return path


LogPath = Annotated[str, AfterValidator(check_log_path)]
"""The path of a data file in the log (:func:`check_log_path`)."""


class _Action(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Protocol(_Action):
    """Lowest reader and writer versions that understand this table, and, at version 7, its named features
    (docs/format.md, "Table features").

    Versions 1 to 6 (*legacy*) each imply a bundle: 1, plain commit files; 2, self-verifying commit files and
    transaction records in checkpoints; 3, also pins; 4, also prior-rows files; 5, also looked-up ones; 6, also
    added columns. Version 7 (both the reader and the writer version) implies only what 2 does and lists the
    features the table uses: ``reader_features`` (those a reader must know) and ``writer_features`` (every
    feature, reader ones included). The two lists are written only at version 7, so every legacy protocol
    serialises as before. What a protocol supports is answered by :mod:`maintd.table.log.features` alone.
    """

    min_reader_version: int = BASE_VERSION
    min_writer_version: int = BASE_VERSION
    reader_features: tuple[str, ...] | None = None
    writer_features: tuple[str, ...] | None = None

    @model_validator(mode="after")
    def _check(self) -> Protocol:
        versions = (self.min_reader_version, self.min_writer_version)
        if FEATURES_VERSION in versions and min(versions) < FEATURES_VERSION:  # above 7: refused by the number
            raise ValueError(f"a table-features protocol has reader and writer version {FEATURES_VERSION}, not "
                             f"reader {versions[0]} and writer {versions[1]}")
        for version, listed, what in ((self.min_reader_version, self.reader_features, "reader_features"),
                                      (self.min_writer_version, self.writer_features, "writer_features")):
            if version < FEATURES_VERSION and listed is not None:
                raise ValueError(f"{what} are listed only at version {FEATURES_VERSION} (this is {version})")
            if version == FEATURES_VERSION and listed is None:
                raise ValueError(f"a protocol of version {FEATURES_VERSION} lists its {what}")
            if listed is not None and (len(set(listed)) != len(listed) or not all(listed)):
                raise ValueError(f"{what} names a feature twice or an empty name")
        if self.reader_features is not None and self.writer_features is not None:
            missing = sorted(set(self.reader_features) - set(self.writer_features))
            if missing:
                raise ValueError(f"reader features {missing} are not among the writer features (writers must know "
                                 "every reader feature)")
        return self

    @property
    def table_features(self) -> bool:
        """True for the table-features protocol (version 7): its features are listed, not implied."""
        return self.min_reader_version == FEATURES_VERSION

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The feature lists are written only when present (version 7), so legacy protocols read as they did."""
        out: dict[str, Any] = handler(self)
        for key in ("reader_features", "writer_features"):
            if out.get(key) is None:
                out.pop(key, None)
        return out


class Field_(_Action):
    """One column of the table schema; ``type`` is a maintd type name (docs/format.md, "Types and schema").

    ``added``: the column was added after the table was created (feature ``addedColumns``: protocol 6 or
    named, docs/format.md, "Schema evolution"): always nullable, and data files written before may lack it
    (read as nulls), as may a writer's batch.
    """

    name: str
    type: str
    nullable: bool = True
    added: bool = False

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """``added`` is written only when true, so that the metadata of tables whose schema never changed reads
        as older code wrote it (its readers know no such field)."""
        out: dict[str, Any] = handler(self)
        if not self.added:
            out.pop("added", None)
        return out


class Metadata(_Action):
    """Schema, primary key, partitioning, bucket count and properties of the table."""

    table_id: str
    name: str | None = None
    fields: tuple[Field_, ...]
    primary_key: tuple[str, ...]
    partition_by: tuple[str, ...] = ()
    buckets: int = Field(ge=1, le=4096)
    properties: dict[str, str] = Field(default_factory=dict)
    created_time: int

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)


class AddFile(_Action):
    """A data file that becomes part of the table.

    For files written by writers (level-0 DeltaFiles) the row version of every row is the
    version of the commit that adds the file, so ``min_version == max_version == commit version``
    and the file itself holds no version column. Files written by merges carry each row's
    version in the hidden ``_maintd_version`` column.
    """

    path: LogPath
    partition: dict[str, str | None] = Field(default_factory=dict)
    bucket: int = Field(ge=0)
    kind: FileKind
    level: int | None = Field(default=0, ge=0, le=2)
    rows: int = Field(ge=0)
    bytes: int = Field(ge=0)
    min_version: int = Field(ge=0)
    max_version: int = Field(ge=0)
    min_commit_time: int
    max_commit_time: int
    delete_rows: int = Field(default=0, ge=0)
    key_min: tuple[KeyValue, ...] | None = None
    key_max: tuple[KeyValue, ...] | None = None
    data_change: bool = True
    modification_time: int = 0

    @model_validator(mode="after")
    def _check(self) -> AddFile:
        if self.kind == "base":
            if self.level is not None:
                raise ValueError("a BaseFile has no level (level must be null)")
            if self.delete_rows:
                raise ValueError("a BaseFile holds no delete rows")
        elif self.level is None:
            raise ValueError("a DeltaFile needs a level 0, 1 or 2")
        if self.min_version > self.max_version:
            raise ValueError("min_version > max_version")
        if self.min_commit_time > self.max_commit_time:
            raise ValueError("min_commit_time > max_commit_time")
        return self

    @property
    def carries_versions(self) -> bool:
        """True if the file holds the hidden version column (any file written by a merge)."""
        return not (self.kind == "delta" and self.level == 0)


class RemoveFile(_Action):
    """A data file that stops being part of the table at this commit (a tombstone)."""

    path: LogPath
    deletion_time: int
    data_change: bool = True
    partition: dict[str, str | None] = Field(default_factory=dict)
    bucket: int | None = None
    bytes: int | None = None


class PriorRows(_Action):
    """A prior-rows file: what one compaction unit read for the keys the writers changed, kept for the change
    feed (docs/format.md, "Prior rows"); never read as table data. Feature ``priorRows``.

    For each key of the unit's DeltaFile rows it holds the row BaseFiles ``of`` hold at ``below`` (or a
    *marker*: the key, op delete, version 0) and every version of the key in DeltaFiles ``deltas``. Written by
    the compaction that removes ``of`` and deleted with them (``deletion_time``).

    A *looked-up* file (``lookup``, feature ``lookedUpPriorRows``) is written by a clustering for the keys of
    the DeltaFiles it merges, while ``of`` stay live: its ``deletion_time`` is 0 until a commit removes one of
    ``of``, then that commit's time (set as the log is read).
    """

    path: LogPath
    of: tuple[LogPath, ...] = Field(min_length=1)
    """The BaseFiles the unit rewrote (all removed by the commit that adds this)."""
    deltas: tuple[LogPath, ...] = Field(min_length=1)
    """The DeltaFiles the unit read; their rows in ``key_lo..key_hi`` are all in the file."""
    partition: dict[str, str | None] = Field(default_factory=dict)
    bucket: int = Field(ge=0)
    key_lo: tuple[KeyValue, ...] | None = None
    """The unit's keys are ``key_lo <= key < key_hi`` (None: unbounded on that side)."""
    key_hi: tuple[KeyValue, ...] | None = None
    unit: int = Field(default=0, ge=0)
    """Which of its compaction task's ``units`` key ranges the unit was: the files of all of them together hold
    every DeltaFile row the task read."""
    units: int = Field(default=1, ge=1)
    below: int = Field(ge=0)
    """The greatest version BaseFiles ``of`` hold; every DeltaFile row is newer."""
    keys: int = Field(ge=0)
    """Keys the file answers for: the keys of the DeltaFile rows in the unit's range."""
    rows: int = Field(ge=0)
    """Rows of ``of`` it holds (markers excluded; at most ``keys``)."""
    delta_rows: int = Field(ge=0)
    """Rows of ``deltas`` it holds."""
    bytes: int = Field(ge=0)
    deletion_time: int = 0
    lookup: bool = False
    """Written by a clustering that looked its keys up in BaseFiles ``of``, which it left live (feature
    ``lookedUpPriorRows``)."""

    @property
    def attached(self) -> bool:
        """A looked-up file whose BaseFiles are all still live: it has no deletion time yet."""
        return self.lookup and self.deletion_time == 0

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """``lookup`` is written only when true, so that the files compactions store read as protocol 4 wrote
        them (its readers know no such field)."""
        out: dict[str, Any] = handler(self)
        if not self.lookup:
            out.pop("lookup", None)
        return out

    @model_validator(mode="after")
    def _check(self) -> PriorRows:
        if self.rows > self.keys:
            raise ValueError("a prior-rows file holds at most one BaseFile row per key it answers for")
        if self.path in self.of or self.path in self.deltas or set(self.of) & set(self.deltas):
            raise ValueError("a prior-rows file, its BaseFiles and its DeltaFiles are different files")
        if self.unit >= self.units:
            raise ValueError("unit must be below units")
        return self


class CommitInfo(_Action):
    """Who committed what, and under which read version and isolation level."""

    operation: str
    timestamp: int
    txn_id: str
    read_version: int | None = None
    isolation_level: IsolationLevel = "WriteSerializable"
    is_blind_append: bool = False
    operation_parameters: dict[str, Any] = Field(default_factory=dict)
    metrics: dict[str, Any] = Field(default_factory=dict)
    engine: str = "maintd"


class Txn(_Action):
    """The last version an exactly-once writer (``app_id``) committed."""

    app_id: str
    version: int
    last_updated: int


class Pin(_Action):
    """A reader lease: version ``version`` is kept readable (never expired, none of its files deleted) until
    ``expires`` (ms), measured against reclamation's ``now``. Tables with feature ``pins`` only
    (protocol 3 and up, or named).

    ``who`` is ``user@host`` of the process that pinned it; ``reason`` is free text for operators.
    """

    id: str = Field(min_length=1, max_length=64)
    version: int = Field(ge=0)
    created: int
    expires: int
    reason: str = ""
    who: str = ""

    @model_validator(mode="after")
    def _check(self) -> Pin:
        if self.expires <= self.created:
            raise ValueError("a pin must expire after it was created")
        return self

    def live(self, now_ms: int) -> bool:
        """True while the pin holds (``now_ms`` before its expiry)."""
        return now_ms < self.expires

    @property
    def created_at(self) -> datetime:
        return datetime.fromtimestamp(self.created / 1000, UTC)

    @property
    def expires_at(self) -> datetime:
        return datetime.fromtimestamp(self.expires / 1000, UTC)


class Unpin(_Action):
    """Pin ``id`` stops holding (released by its owner, expired and cleaned up, or forced by a PURGE)."""

    id: str = Field(min_length=1, max_length=64)
    reason: str = ""


class Expire(_Action):
    """Reclamation's record of what it expires, committed before it deletes anything: every version before
    ``before`` is expired (``timestamp``: the commit time of ``before``, ms). Tables with feature ``pins`` only (the
    others carry the same two numbers in the ``commit_info`` parameters of an ``EXPIRE`` commit).

    A pin of a version before ``before`` and this commit conflict, whichever lands first.
    """

    before: int = Field(ge=0)
    timestamp: int = 0


Action = Protocol | Metadata | AddFile | RemoveFile | CommitInfo | Txn | Pin | Unpin | Expire | PriorRows

EXPIRE_OPERATION = "EXPIRE"
"""The operation of reclamation's commit that records what it expires before it deletes anything."""
PURGE_OPERATION = "PURGE"


def expired_by(actions: Iterable[Action]) -> Expire | None:
    """What a commit expires: its ``expire`` action or, in tables without feature ``pins`` (whose readers may know no
    such action), the ``oldest_retained_version`` and ``retained_timestamp`` parameters of an ``EXPIRE`` or ``PURGE``
    commit; None if it expires nothing."""
    actions = list(actions)
    marks = [a for a in actions if isinstance(a, Expire)]
    info = next((a for a in actions if isinstance(a, CommitInfo)), None)
    if info is not None and info.operation in (EXPIRE_OPERATION, PURGE_OPERATION):
        before = info.operation_parameters.get("oldest_retained_version")
        ts = info.operation_parameters.get("retained_timestamp", 0)
        if isinstance(before, int) and before >= 0:
            marks.append(Expire(before=before, timestamp=ts if isinstance(ts, int) else 0))
    return max(marks, key=lambda e: e.before) if marks else None


ACTION_KEYS: dict[type[_Action], str] = {
    Protocol: "protocol",
    Metadata: "metadata",
    AddFile: "add",
    RemoveFile: "remove",
    CommitInfo: "commit_info",
    Txn: "txn",
    Pin: "pin",
    Unpin: "unpin",
    Expire: "expire",
    PriorRows: "prior",
}
KEY_ACTIONS: dict[str, type[_Action]] = {v: k for k, v in ACTION_KEYS.items()}


def action_to_json(action: _Action) -> str:
    """Serialise one action as one log line (without the newline)."""
    key = ACTION_KEYS[type(action)]
    return f'{{"{key}":{action.model_dump_json()}}}'


def action_from_dict(obj: Annotated[dict[str, Any], "one decoded log line"]) -> Action:
    """Parse one decoded log line; raises ``ValueError`` on anything that is not exactly one action."""
    if not isinstance(obj, dict) or len(obj) != 1:
        raise ValueError("a log line must be an object with exactly one action key")
    ((key, body),) = obj.items()
    cls = KEY_ACTIONS.get(key)
    if cls is None:
        raise ValueError(f"unknown action {key!r}")
    return cls.model_validate(body)  # type: ignore[return-value]
