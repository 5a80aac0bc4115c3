"""The names of the targets a table may declare (:mod:`maintd.planner.targets`), in one place that imports
nothing: the state store keeps a column per target, and the commands that only read the store (``status``,
``history``) must not load the planner to know them."""

from __future__ import annotations

from typing import Literal

TargetName = Literal["read_files_per_bucket", "merge_delay_minutes", "write_amplification"]
TARGET_NAMES: tuple[TargetName, ...] = ("read_files_per_bucket", "merge_delay_minutes", "write_amplification")

__all__ = ["TARGET_NAMES", "TargetName"]
