"""``plan(snapshot, policy, now)``: the pure function from a table state to a maintenance plan.

No I/O and no clock reads: the same snapshot, policy and ``now`` always give the same plan, so plans
can be tested exhaustively and replayed. Per bucket at most one task (compaction, which subsumes
clustering, before clustering); tasks are ranked by benefit per byte rewritten and cut at the budget.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from maintd.planner.candidates import Candidate, Skip
from maintd.planner.clustering import clustering_candidate
from maintd.planner.compaction import compaction_candidate
from maintd.planner.models import BucketDecision, MaintenancePlan, PlanTask
from maintd.planner.policy import Policy, RankingPolicy
from maintd.planner.stats import MS_PER_HOUR, BucketStats, bucket_stats
from maintd.table.log.snapshot import Snapshot
from maintd.units import fmt_bytes


@dataclass(frozen=True)
class _Ranked:
    stats: BucketStats
    cand: Candidate
    score: float


def decide(stats: BucketStats, policy: Policy) -> Candidate | Skip:
    """The one task a bucket gets (compaction first, then clustering), or why it gets none."""
    comp = compaction_candidate(stats, policy.compaction)
    if isinstance(comp, Candidate):
        return comp
    clus = clustering_candidate(stats, policy.clustering)
    if isinstance(clus, Candidate):
        return clus
    if comp.rule == clus.rule == "no_delta_files":
        return Skip("no_delta_files", "nothing to do, no DeltaFiles")
    held = comp.rule == "compaction.min_interval_hours"  # a trigger fired: the most useful rule to report
    rule = comp.rule if held or clus.rule == "no_delta_files" else clus.rule
    return Skip(rule, f"{clus.message}; {comp.message}")


def score(stats: BucketStats, cand: Candidate, ranking: RankingPolicy) -> float:
    """Benefit for cost: (files removed x file cost + stale and expired bytes) / (bytes + files rewritten)."""
    fc = ranking.file_cost_bytes
    n = len(cand.inputs)
    expired = sum(f.bytes for f in stats.expired_deltas) if cand.kind == "compact" else 0
    benefit = (n - 1) * fc + cand.stale_bytes + expired
    cost = cand.input_bytes + n * fc
    age_days = (stats.oldest_delta_age_ms or 0) / (24 * MS_PER_HOUR)
    return round(benefit / cost * (1 + ranking.age_weight_per_day * max(0.0, age_days)), 9)


def task_id(table_uri: str, read_version: int, cand: Candidate) -> str:
    """A deterministic id: the same inputs at the same read version always get the same id."""
    h = hashlib.sha256("\n".join([table_uri, str(read_version), cand.kind, *(f.path for f in cand.inputs)])
                       .encode()).hexdigest()[:16]
    return f"{cand.kind}-{read_version}-{h}"


def _task(r: _Ranked, table_uri: str, read_version: int, target_file_bytes: int) -> PlanTask:
    c = r.cand
    return PlanTask(task_id=task_id(table_uri, read_version, c), kind=c.kind, partition=dict(r.stats.partition),
                    bucket=r.stats.bucket, target_level=c.target_level, inputs=tuple(f.path for f in c.inputs),
                    input_bytes=c.input_bytes, input_rows=c.input_rows, input_files=len(c.inputs),
                    expected_output_bytes=c.expected_output_bytes,
                    target_file_bytes=target_file_bytes if c.kind == "compact" else None, reason=c.reason,
                    score=r.score)


def _decision(s: BucketStats, action: str, rule: str, message: str) -> BucketDecision:
    return BucketDecision(partition=dict(s.partition), bucket=s.bucket, action=action,  # type: ignore[arg-type]
                          rule=rule, message=message)


def _cut(ranked: Sequence[_Ranked], policy: Policy) -> tuple[list[_Ranked], dict[int, tuple[str, str]]]:
    """Tasks within the budget, best first; the others with the budget rule that deferred them.

    A task that does not fit is deferred and the cut goes on: a smaller task ranked after it still runs if it
    fits what is left of ``max_bytes``.
    """
    chosen: list[_Ranked] = []
    deferred: dict[int, tuple[str, str]] = {}
    used, b = 0, policy.budget
    for i, r in enumerate(ranked):
        size = r.cand.input_bytes
        if len(chosen) >= b.max_tasks:
            deferred[i] = ("budget.max_tasks", f"deferred, {b.max_tasks} better tasks fill max_tasks")
        elif used + size > b.max_bytes and chosen:  # an oversized task may still run alone, first
            left = max(0, b.max_bytes - used)  # an oversized first task may have used more than max_bytes
            deferred[i] = ("budget.max_bytes", f"deferred, {fmt_bytes(size)} does not fit the "
                           f"{fmt_bytes(left)} left of max_bytes {fmt_bytes(b.max_bytes)}")
        else:
            chosen.append(r)
            used += size
    return chosen, deferred


def plan_buckets(stats: Sequence[BucketStats], policy: Policy, *, table_uri: str, read_version: int,
                 now: datetime, policy_name: str) -> MaintenancePlan:
    """Plan from precomputed bucket statistics (``stats`` in (partition, bucket) order)."""
    ranked: list[_Ranked] = []
    skips: dict[int, Skip] = {}
    for i, s in enumerate(stats):
        d = decide(s, policy)
        if isinstance(d, Skip):
            skips[i] = d
        else:
            ranked.append(_Ranked(s, d, score(s, d, policy.ranking)))
    order = {id(r): k for k, r in enumerate(ranked)}
    ranked.sort(key=lambda r: (-r.score, order[id(r)]))
    chosen, deferred = _cut(ranked, policy)
    by_bucket: dict[int, BucketDecision] = {}
    for k, r in enumerate(ranked):
        rule, msg = deferred.get(k, (r.cand.rule, r.cand.reason))
        by_bucket[id(r.stats)] = _decision(r.stats, "deferred" if k in deferred else r.cand.kind, rule, msg)
    decisions = tuple(by_bucket.get(id(s)) or _decision(s, "skip", skips[i].rule, skips[i].message)
                      for i, s in enumerate(stats))
    return MaintenancePlan(table_uri=table_uri, read_version=read_version, created_at=now, policy_name=policy_name,
                           tasks=tuple(_task(r, table_uri, read_version, policy.compaction.target_file_bytes)
                                       for r in chosen), decisions=decisions)


def plan(snapshot: Snapshot, policy: Policy, now: datetime, table_uri: str = "", *,
         policy_name: str = "default") -> MaintenancePlan:
    """Plan the clustering and compaction of one table as of ``snapshot``.

    Args:
        snapshot: the table state; its version becomes the plan's ``read_version``.
        policy: the table's effective policy (:meth:`PolicyFile.resolve`).
        now: the planning time (timezone-aware); ages and retention are measured from it.
        table_uri: recorded in the plan and in task ids.
        policy_name: where the policy came from, recorded in the plan.

    Returns:
        The plan: tasks within the budget, best first, and one decision per (partition, bucket) that holds
        live files (a bucket without files has nothing to decide and is not listed).
    """
    return plan_buckets(bucket_stats(snapshot, now), policy, table_uri=table_uri, read_version=snapshot.version,
                        now=now, policy_name=policy_name)
