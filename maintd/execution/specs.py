"""What travels between the driver and the Spark tasks: task specs in, task results out (JSON both ways).

A :class:`TaskSpec` is self-contained: the table URI, the table metadata and the ``add`` action of
every input file. A Spark task therefore never opens the log, never infers a schema and never lists a
directory; it reads exactly the files it is given. A :class:`TaskResult` holds only the ``add`` of the
file written (a few hundred bytes), so rows never pass through the driver.

:class:`PlanDoc` is the part of a maintenance plan execution needs. It validates the planner's
``MaintenancePlan`` (or its JSON, for ``spark-submit``) while ignoring fields execution does not use,
so the planner can grow without breaking jobs that are already deployed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from maintd.errors import InvalidInputError
from maintd.table.actions import AddFile, Metadata
from maintd.table.snapshot import Snapshot

TaskKind = Literal["cluster", "compact"]
DEFAULT_TASK_MEMORY = 512 * 1024 * 1024
"""Memory one task may use for rows (bytes) before it switches from an in-memory merge to streaming."""


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
    """How tasks run: memory budget per task (bytes), read threads per task, how tasks are packed into
    Spark tasks, injected faults (tests)."""

    task_memory_bytes: int = Field(default=DEFAULT_TASK_MEMORY, ge=1)
    read_threads: int = Field(default=4, ge=1)
    slices: int | None = Field(default=None, ge=1)
    """Spark tasks per run, each running a pack of plan tasks (None: Spark's default parallelism, i.e.
    one per core; never more than the plan's tasks)."""
    pack_threads: int = Field(default=1, ge=1)
    """Plan tasks of one pack run at once (each holds up to ``task_memory_bytes``)."""
    freeze_zip_caches: bool = True
    """Stop Python workers from re-reading Spark's zip archives before every Spark task (see
    :func:`maintd.execution.spark.freeze_zip_caches`)."""
    faults: dict[str, str] = Field(default_factory=dict)
    """task_id -> fault name (``after_first_chunk``): raise inside the task, after output was written."""


class TaskSpec(_Model):
    """Everything one Spark task needs to rewrite one bucket's files."""

    table_uri: str
    task_id: str
    kind: TaskKind
    partition: dict[str, str | None]
    bucket: int
    target_level: int | None
    metadata: Metadata
    inputs: tuple[AddFile, ...]
    task_memory_bytes: int = DEFAULT_TASK_MEMORY
    read_threads: int = 4
    fault: str | None = None


class TaskResult(_Model):
    """What a task reports back: the file it wrote (if any) and what it read and wrote."""

    task_id: str
    kind: TaskKind
    ok: bool
    inputs: tuple[str, ...]
    add: AddFile | None = None
    bytes_read: int = 0
    rows_read: int = 0
    rows_written: int = 0
    bytes_written: int = 0
    seconds: float = 0.0
    mode: Literal["memory", "stream", "none"] = "none"
    error: str | None = None
    phases: dict[str, float] = Field(default_factory=dict)
    """Seconds of the task spent reading (fetch and decode), merging and writing."""


def task_specs(plan: PlanDoc, snapshot: Snapshot, options: ExecutionOptions | None = None) -> list[TaskSpec]:
    """Resolve every task's input paths to their ``add`` actions at the plan's read version.

    Raises:
        InvalidInputError: the snapshot is not the plan's read version, or an input is not live in it.
    """
    opts = options or ExecutionOptions()
    if snapshot.version != plan.read_version:
        raise InvalidInputError(
            f"table {plan.table_uri}: the plan was made at version {plan.read_version}, "
            f"not {snapshot.version}; load the snapshot at the plan's read version"
        )
    return [_spec(plan.table_uri, t, snapshot, opts) for t in plan.tasks]


def _spec(uri: str, t: PlanTaskDoc, snapshot: Snapshot, opts: ExecutionOptions) -> TaskSpec:
    missing = [p for p in t.inputs if p not in snapshot.files]
    if missing:
        raise InvalidInputError(
            f"table {uri}: task {t.task_id} reads {missing[0]} (and {len(missing) - 1} more), which is not live "
            f"at version {snapshot.version}; re-plan"
        )
    if not t.inputs:
        raise InvalidInputError(f"table {uri}: task {t.task_id} has no input files")
    level = None if t.kind == "compact" else (t.target_level if t.target_level is not None else 1)
    return TaskSpec(table_uri=uri, task_id=t.task_id, kind=t.kind, partition=dict(t.partition), bucket=t.bucket,
                    target_level=level, metadata=snapshot.metadata, inputs=tuple(snapshot.files[p] for p in t.inputs),
                    task_memory_bytes=opts.task_memory_bytes, read_threads=opts.read_threads,
                    fault=opts.faults.get(t.task_id))


def results_json(results: Iterable[TaskResult]) -> str:
    return "[" + ",".join(r.model_dump_json() for r in results) + "]"
