"""The persisted plan: frozen, validated models that round-trip through JSON.

A plan is written by ``maintd plan``/the daemon and executed later by Spark jobs, so everything in it
is a value: file paths (not objects), sizes, the rule that decided each bucket.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

TaskKind = Literal["cluster", "compact"]
Action = Literal["cluster", "compact", "skip", "deferred", "error"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PlanTask(_Model):
    """One rewrite: the inputs of one (partition, bucket) merged into new files, committed together.

    ``cluster`` writes one DeltaFile at ``target_level`` (1 or 2) holding every row version of the inputs;
    ``compact`` writes BaseFiles of about ``target_file_bytes`` (``target_level`` None) from all the
    bucket's DeltaFiles and the BaseFiles whose key ranges they touch, as of ``read_version``.
    """

    task_id: str
    kind: TaskKind
    partition: dict[str, str | None] = Field(default_factory=dict)
    bucket: int = Field(ge=0)
    target_level: int | None = Field(default=None, ge=1, le=2)
    inputs: tuple[str, ...] = Field(min_length=1)
    input_bytes: int = Field(ge=0)
    input_rows: int = Field(ge=0)
    input_files: int = Field(ge=1)
    expected_output_bytes: int = Field(ge=0)
    target_file_bytes: int | None = Field(default=None, gt=0)
    """Compaction: the size of each BaseFile written (None for clustering)."""
    reason: str
    score: float = Field(ge=0)


class BucketDecision(_Model):
    """What the planner decided for one (partition, bucket), and the rule that decided it."""

    partition: dict[str, str | None] = Field(default_factory=dict)
    bucket: int = Field(ge=0)
    action: Action
    rule: str
    message: str


class MaintenancePlan(_Model):
    """The tasks to run on one table, as of ``read_version``, plus one decision per bucket."""

    table_uri: str
    read_version: int
    created_at: datetime
    policy_name: str
    tasks: tuple[PlanTask, ...] = ()
    decisions: tuple[BucketDecision, ...] = ()

    @property
    def input_bytes(self) -> int:
        return sum(t.input_bytes for t in self.tasks)
