"""What travels between the driver and the Spark tasks: task specs in, task results out (JSON both ways).

A plan task (one bucket's rewrite, the unit of commit) runs as one or more *units*, each a
:class:`TaskSpec`: a large compaction is split into key ranges (:mod:`maintd.execution.units`), every
other task is one unit. A spec is self-contained: the table URI, the table metadata, the key range and
the ``add`` action of every input file. A Spark task therefore never opens the log, never infers a
schema and never lists a directory; it reads exactly the files it is given. A :class:`TaskResult`
holds only the ``add`` actions of the files written (a few hundred bytes each), so rows never pass
through the driver.

:class:`PlanDoc` is the part of a maintenance plan execution needs. It validates the planner's
``MaintenancePlan`` (or its JSON, for ``spark-submit``) while ignoring fields execution does not use,
so the planner can grow without breaking jobs that are already deployed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from maintd.table.files.keys import KeyRange
from maintd.table.log.actions import AddFile, KeyValue, Metadata, PriorRows

TaskKind = Literal["cluster", "compact"]
DEFAULT_TASK_MEMORY = 512 * 1024 * 1024
"""Memory one task may use (bytes): rows, read buffers and merge copies, above the worker's own footprint."""
DEFAULT_TARGET_FILE_BYTES = 128 * 1024 * 1024
"""Size of the BaseFiles a compaction writes, unless the plan says otherwise (``compaction.target_file_bytes``)."""
DEFAULT_IN_PROCESS_BYTES = 64 * 1024 * 1024
"""Input bytes up to which a run's plan executes in threads of the process that made it rather than as Spark
jobs (:func:`maintd.execution.driver.runs_in_process`)."""
DEFAULT_TASK_INPUT_BYTES = 256 * 1024 * 1024
"""Input bytes of one Spark task: large compactions are split into key ranges of about this size and small
plan tasks are packed together up to it."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PlanTaskDoc(BaseModel):
    """One task of a plan, as execution sees it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    task_id: str
    kind: TaskKind
    partition: dict[str, str | None] = Field(default_factory=dict)
    bucket: int
    target_level: int | None = None
    inputs: tuple[str, ...]
    input_bytes: int = 0
    target_file_bytes: int | None = None


class PlanDoc(BaseModel):
    """A maintenance plan, as execution sees it (the planner's ``MaintenancePlan`` validates as one)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    table_uri: str
    read_version: int
    policy_name: str | None = None
    tasks: tuple[PlanTaskDoc, ...]

    @classmethod
    def of(cls, plan: Any) -> PlanDoc:
        """Accept a PlanDoc, the planner's pydantic plan, a dict, or a JSON string."""
        if isinstance(plan, PlanDoc):
            return plan
        if isinstance(plan, str | bytes):
            return cls.model_validate_json(plan)
        if isinstance(plan, BaseModel):
            return cls.model_validate(plan.model_dump(mode="json"))
        if isinstance(plan, dict):
            return cls.model_validate(plan)
        return cls.model_validate(plan, from_attributes=True)


class ExecutionOptions(_Model):
    """How tasks run: memory budget per task (bytes), fetch and decode threads per task, how much input one
    Spark task takes, how results are committed, injected faults (tests)."""

    task_memory_bytes: int = Field(default=DEFAULT_TASK_MEMORY, ge=1)
    read_threads: int = Field(default=4, ge=1)
    """Inputs of a unit fetched at once: reads wait on storage (an object store's latency), not on a core."""
    decode_threads: int = Field(default=1, ge=1)
    """Threads that decode a unit's fetched inputs. One: a run already has at least one Spark task per core,
    so each core decodes its own unit; more threads per unit only contend for the cores and the GIL."""
    task_input_bytes: int = Field(default=DEFAULT_TASK_INPUT_BYTES, ge=1)
    """Input bytes of one Spark task (large compactions split into key ranges of this size, small plan tasks
    packed up to it); a run has at least one Spark task per executor core when it has enough units."""
    pack_threads: int = Field(default=1, ge=1)
    """Plan tasks of one pack run at once (each holds up to ``task_memory_bytes``)."""
    in_process_max_bytes: int = Field(default=DEFAULT_IN_PROCESS_BYTES, ge=0)
    """A run whose plan reads at most this many bytes executes in process: in child processes (or
    threads, ``in_process_workers``) of the process that planned it (the daemon, ``maintd run``), not as Spark
    jobs, and starts no Spark session for it; 0: every run on Spark.

    Every Spark job costs a fixed time before any work (more on a cluster whose executors start on demand),
    which is most of a small rewrite (docs/benchmarks.md, "Maintenance"). Units run in process with the same
    memory budget per unit as on Spark, ``in_process_threads`` at once."""
    in_process_threads: int = Field(default=0, ge=0)
    """Units at once when a run executes in process (child processes or threads, ``in_process_workers``); 0: one
    per CPU this process may run on, within its container's CPU quota (:func:`maintd.execution.cpus.usable_cpus`)."""
    in_process_workers: Literal["processes", "threads"] = "processes"
    """What runs the units of a run in process: ``processes`` or ``threads``. ``processes``: warm processes of the
    standard library's fork server, a pack at a time each (:mod:`maintd.execution.local`: no GIL shared between
    units; one that dies or hangs is killed and its pack run once more, not this process). ``threads``: threads of this
    process (no process to start; slower on many small files, and a hung unit's thread cannot be killed).
    A table whose storage is registered in this process only runs in threads either way."""
    unit_timeout_seconds: float = Field(default=0.0, ge=0)
    """Seconds a pack of units may take (in process: in its process; on Spark: its job, from submission)
    before it is killed and run once more (a second timeout fails its units); 0: 300 s plus 1 s per MiB of the
    pack's input (:func:`maintd.execution.local.pack_timeout`)."""
    commit_max_tasks: int = Field(default=64, ge=1)
    """A group of finished plan tasks is committed once it holds this many..."""
    commit_interval_seconds: float = Field(default=30.0, ge=0)
    """...or once its first task has waited this long (0: commit every task as it finishes)."""
    ship_storage_options: bool = False
    """Carry the driver's storage credentials to the executors in every task (``spark.ship_storage_options``).
    Off: tasks carry only the options that are not credentials (endpoint, region...) and executors use their own
    (environment, instance role, workload identity)."""
    freeze_zip_caches: bool = True
    """Stop Python workers from re-reading Spark's zip archives before every Spark task (see
    :func:`maintd.execution.spark.freeze_zip_caches`)."""
    faults: dict[str, str] = Field(default_factory=dict)
    """Plan task id (``<task id>#<unit>`` for one key range of it, ``*`` for every task) -> fault, for tests of
    failure handling:

    * ``after_first_chunk``: raise after output was written;
    * ``kill_once:<dir>``: the first attempt to claim ``<dir>`` kills its own Python worker after writing output.
    * ``hold_once:<dir>``: the first attempt to claim ``<dir>`` writes output, records its pid in ``<dir>/held``
      and waits until ``<dir>/release`` exists;
    * ``stop_once:<dir>``: the first attempt to claim ``<dir>`` writes output, records its pid in
      ``<dir>/stopped`` and stops its own process with SIGSTOP.
    * ``stop:<dir>``: every attempt does so, recording its pid in ``<dir>/stopped-<pid>``;
    * ``kill``: every attempt kills its own process after writing output.
    """

    def fault_of(self, task_id: str, unit: int = 0) -> str | None:
        return self.faults.get(f"{task_id}#{unit}") or self.faults.get(task_id) or self.faults.get("*")


class TaskPriors(_Model):
    """What a unit of a compaction task that stores prior rows answers for when its own key range holds none of
    the task's BaseFiles, or none of its DeltaFiles (:mod:`maintd.execution.prior`).

    Such a unit still writes a prior-rows file (every unit of the task must, for the feed to use their files as
    a whole record), and a file names at least one BaseFile and one DeltaFile (docs/format.md, "Prior rows").
    A file of the task the unit was not given holds no row in its key range, so the unit's file answers for
    it truly.
    """

    bases: tuple[str, ...] = Field(min_length=1)
    """Every BaseFile the task rewrites."""
    below: int = Field(ge=0)
    """The greatest version they hold."""
    delta: str
    """One DeltaFile of the task."""


class TaskLookup(_Model):
    """The BaseFiles a clustering of a ``changes.prior.rows=lookup`` table looks the keys of its DeltaFiles up
    in (:mod:`maintd.execution.lookup`): every live BaseFile of its bucket when it was planned."""

    bases: tuple[AddFile, ...] = Field(min_length=1)
    below: int = Field(ge=0)
    """The greatest version they hold; every DeltaFile the clustering merges is newer."""


class TaskSpec(_Model):
    """Everything one Spark task needs to rewrite one unit (a key range, or all) of one bucket's files."""

    table_uri: str
    task_id: str
    kind: TaskKind
    partition: dict[str, str | None]
    bucket: int
    target_level: int | None
    metadata: Metadata
    inputs: tuple[AddFile, ...]
    unit: int = 0
    units: int = 1
    key_lo: tuple[KeyValue, ...] | None = None
    """The unit's keys are ``key_lo <= key < key_hi`` (None: unbounded)."""
    key_hi: tuple[KeyValue, ...] | None = None
    target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES
    token: str = Field(default="0" * 16, pattern=r"^[0-9a-f]{16}$")
    """Starts the name of every file the unit writes, in every attempt (so failed attempts can be found)."""
    task_memory_bytes: int = DEFAULT_TASK_MEMORY
    read_threads: int = 4
    decode_threads: int = 1
    fault: str | None = None
    prior_rows: bool = False
    """A compaction of a table with ``changes.prior.rows`` whose plan task reads BaseFiles and DeltaFiles: also
    write the prior rows of the keys it folds (:mod:`maintd.execution.prior`). Set for every unit of such a
    task, whichever of those files its own key range holds, so that the task's files form a whole record."""
    task_priors: TaskPriors | None = None
    """For a unit of such a task whose key range holds none of its BaseFiles or none of its DeltaFiles."""
    lookup: TaskLookup | None = None
    """A clustering that also stores the BaseFile rows of the keys it merges (tables with
    ``changes.prior.rows=lookup``)."""

    @property
    def key_range(self) -> KeyRange:
        return KeyRange(self.key_lo, self.key_hi)


class TaskResult(_Model):
    """What a unit (or, combined, a whole plan task) reports back: the files it wrote and what it read and wrote."""

    task_id: str
    kind: TaskKind
    ok: bool
    inputs: tuple[str, ...]
    adds: tuple[AddFile, ...] = ()
    priors: tuple[PriorRows, ...] = ()
    """Prior-rows files of the BaseFiles a compaction folded (tables with ``changes.prior.rows``)."""
    unit: int = 0
    units: int = 1
    bytes_read: int = 0
    rows_read: int = 0
    rows_written: int = 0
    bytes_written: int = 0
    seconds: float = 0.0
    mode: Literal["memory", "stream", "spill", "none"] = "none"
    """How the inputs were merged: read whole, streamed in one k-way merge, or merged in passes through
    spilled runs (more inputs than the memory budget can stream at once)."""
    error: str | None = None
    phases: dict[str, float] = Field(default_factory=dict)
    """Seconds of the task spent reading (fetch and decode), merging and writing."""
    token: str = "0" * 16
    attempt: int = 0
    """The Spark attempt number of the attempt that produced this result (0: the first)."""


    @property
    def written(self) -> list[str]:
        """Every file the unit (or task) wrote and reports: its data files and prior-rows files."""
        return [a.path for a in self.adds] + [p.path for p in self.priors]


def results_json(results: Iterable[TaskResult]) -> str:
    return "[" + ",".join(r.model_dump_json() for r in results) + "]"
