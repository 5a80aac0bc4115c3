"""The maintenance planner: pure planning of clustering and compaction from a snapshot, a policy and ``now``.

Imports only :mod:`maintd.table`, :mod:`maintd.errors`, pydantic, yaml and the standard library.
"""

from maintd.planner.due import next_time_trigger
from maintd.planner.models import BucketDecision, MaintenancePlan, PlanTask
from maintd.planner.planner import decide, plan, plan_buckets
from maintd.planner.policy import Policy
from maintd.planner.policy_files import (
    PolicyFile,
    ResolvedPolicy,
    default_policy,
    load_policy_file,
    parse_policy,
    policy_yaml,
    with_overrides,
)
from maintd.planner.stats import BucketStats, bucket_stats

__all__ = [
    "BucketDecision",
    "BucketStats",
    "MaintenancePlan",
    "PlanTask",
    "Policy",
    "PolicyFile",
    "ResolvedPolicy",
    "bucket_stats",
    "decide",
    "default_policy",
    "load_policy_file",
    "next_time_trigger",
    "parse_policy",
    "plan",
    "plan_buckets",
    "policy_yaml",
    "with_overrides",
]
