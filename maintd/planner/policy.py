"""Policy models: every knob of the planner, validated (docs/policies.md).

The models have no defaults on purpose: the defaults live in one place only, ``policies/default.yaml``
(shipped as ``maintd/defaults/default.yaml``), and every policy is that file with overrides merged
on top (:mod:`maintd.planner.policy_files`). Sizes are bytes and accept ``"32 MiB"`` style strings;
durations are hours; ratios are plain numbers.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from maintd.planner.targets import Targets

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
          "t": 1000**4, "tb": 1000**4, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}
_SIZE_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(value: Any) -> Any:
    """Turn ``"32 MiB"``/``"1GB"``/``"1024"`` into bytes; other values pass through to int validation."""
    if isinstance(value, bool) or not isinstance(value, str):
        return value
    m = _SIZE_RE.match(value)
    if m is None or m.group(2).lower() not in _UNITS:
        raise ValueError(f"{value!r} is not a size; give bytes or a number with a unit such as '32 MiB' or '1 GB'")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


Bytes = Annotated[int, BeforeValidator(parse_size), Field(gt=0, strict=False)]
"""A positive size in bytes (``"128 MiB"`` accepted)."""
Hours = Annotated[float, Field(gt=0)]
"""A positive duration in hours."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LevelPolicy(_Model):
    """When and how DeltaFiles of one level are merged into the next (the output level names the section)."""

    min_files: int = Field(ge=2, description="files of the source level in one mergeable run that trigger a merge")
    trigger_bytes: Bytes = Field(description="total bytes of a mergeable run that trigger a merge (bytes)")
    target_bytes: Bytes = Field(description="a merge stops adding inputs once it holds this many bytes (bytes)")
    max_age_hours: Hours = Field(description="a run whose oldest file is this old is merged whatever its size (h)")


class ClusteringPolicy(_Model):
    """Clustering: level 0 -> 1 -> 2 merges of DeltaFiles that keep every row version."""

    enabled: bool
    isolation_bytes: Bytes = Field(description="a DeltaFile larger than this never enters a merge (bytes)")
    max_time_span_hours: Hours = Field(description="largest commit-time span of a merge output (h)")
    max_input_files: int = Field(ge=2, description="most input files of one clustering task")
    level1: LevelPolicy
    level2: LevelPolicy

    @model_validator(mode="after")
    def _check(self) -> ClusteringPolicy:
        if self.level1.target_bytes > self.level2.target_bytes:
            raise ValueError(f"level1.target_bytes ({self.level1.target_bytes}) must be <= level2.target_bytes "
                             f"({self.level2.target_bytes}): level-2 files are the larger ones")
        for name, lvl in (("level1", self.level1), ("level2", self.level2)):
            if lvl.target_bytes > self.isolation_bytes:
                raise ValueError(f"{name}.target_bytes ({lvl.target_bytes}) must be <= isolation_bytes "
                                 f"({self.isolation_bytes}), or merge outputs would be isolated at once")
            if lvl.min_files > self.max_input_files:
                raise ValueError(f"{name}.min_files ({lvl.min_files}) must be <= max_input_files "
                                 f"({self.max_input_files}), or the trigger could never be met")
        return self


class CompactionPolicy(_Model):
    """Compaction: a bucket's DeltaFiles folded into BaseFiles of a target size (latest row per key)."""

    enabled: bool
    target_file_bytes: Bytes = Field(description="size of the BaseFiles compaction writes, cut between keys; "
                                                 "only BaseFiles whose key ranges DeltaFiles touch are rewritten "
                                                 "when the others hold at least this much (bytes)")
    max_delta_files: int = Field(ge=1, description="DeltaFiles on top of the base that trigger compaction")
    delta_base_ratio: float = Field(gt=0, description="delta bytes / base bytes that trigger compaction")
    max_interval_hours: Hours = Field(description="hours since the last compaction that trigger compaction (h)")
    min_interval_hours: float = Field(ge=0, description="no compaction sooner than this after the last one (h)")
    update_delete_share: float = Field(gt=0, le=1, description="share of delete rows among delta rows that "
                                                                "triggers compaction (0..1]")
    retention_pressure: bool = Field(description="compact when DeltaFiles older than acid.data.retain.hours "
                                                 "are still needed by the current state")

    @model_validator(mode="after")
    def _check(self) -> CompactionPolicy:
        if self.min_interval_hours > self.max_interval_hours:
            raise ValueError(f"min_interval_hours ({self.min_interval_hours}) must be <= max_interval_hours "
                             f"({self.max_interval_hours})")
        return self


class RankingPolicy(_Model):
    """How tasks are ordered: benefit (files and stale bytes removed) per byte rewritten."""

    file_cost_bytes: Bytes = Field(description="the cost of one file expressed in bytes (open cost, metadata)")
    age_weight_per_day: float = Field(ge=0, description="score boost per day the bucket has waited")


class BudgetPolicy(_Model):
    """The per-run cut: tasks beyond it are deferred to a later run."""

    max_bytes: Bytes = Field(description="most input bytes rewritten by one run (bytes)")
    max_tasks: int = Field(ge=1, description="most tasks in one run")


class Policy(_Model):
    """The effective maintenance policy of one table."""

    clustering: ClusteringPolicy
    compaction: CompactionPolicy
    ranking: RankingPolicy
    budget: BudgetPolicy
    target: Targets = Field(description="outcomes maintenance must meet (maintd.planner.targets); the planner's "
                                        "thresholds stay the knobs, targets are what tuning chooses them for")
