"""Reclamation: expire history older than ``acid.data.retain.hours``, delete the files no retained version
needs and the orphans of crashed writers, and PURGE on demand (docs/reclamation.md).

Like the planner, reclamation decides first and acts second: :func:`plan_reclamation` and
:func:`plan_purge` list what would go, :func:`reclaim_table` and :func:`purge_table` carry it out in the
one order that keeps every retained version readable at every moment.
"""

from maintd.reclaim.engine import MIN_GRACE, StepHook
from maintd.reclaim.files import PartitionFilter
from maintd.reclaim.models import FileRef, ReclaimPlan, ReclaimReport
from maintd.reclaim.purge import plan_purge, purge_table
from maintd.reclaim.retention import DEFAULT_ORPHAN_GRACE, held_by_pins, plan_reclamation, reclaim_table

__all__ = [
    "DEFAULT_ORPHAN_GRACE",
    "MIN_GRACE",
    "FileRef",
    "PartitionFilter",
    "ReclaimPlan",
    "ReclaimReport",
    "StepHook",
    "held_by_pins",
    "plan_purge",
    "plan_reclamation",
    "purge_table",
    "reclaim_table",
]
