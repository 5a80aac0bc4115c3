"""One-shot maintenance of tables: plan, execute on Spark, commit, and summarise (``maintd run``).

Each table is independent: a failure in one is recorded in its summary and the others still run.
Within a table, finished buckets are committed in groups while the run goes on (``commit.group_*``
settings), so a failing or conflicting bucket costs only itself. The SparkSession is created only
when some table has work, so ``maintd run`` on healthy tables (or with ``--dry-run``) never starts a
JVM; the summary names the engine, the Spark master and application a run used.

Where a plan runs: under ``spark-submit`` or in a session the caller gives, every plan runs as Spark jobs on
that session's cluster; only a session maintd builds itself with a local master lets a small plan
(``spark.maintd.inProcess.maxInputBytes``) run in this process instead (:mod:`maintd.execution.spark`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from loguru import logger

from maintd.errors import MaintdError
from maintd.execution.budget import Budget
from maintd.execution.driver import run_plan, runs_in_process
from maintd.execution.spark import options_from_settings, runs_small_plans_in_process, spark_session
from maintd.execution.specs import ExecutionOptions
from maintd.planner.targets import Targets
from maintd.table import RetryPolicy, Snapshot, Table

SessionForRun = Callable[[], AbstractContextManager[Any]]
"""Gives the SparkSession a run that needs Spark uses, held until the run ends (the daemon starts it on demand and
stops it when idle)."""
Progress = Callable[[str, str], None]
"""Called with (table URI, stage) as a run moves on: planning, executing, committing, done, failed."""


@dataclass
class TableHealth:
    """Files and bytes of a snapshot, by file kind and level (``L0``, ``L1``, ``L2``, ``base``), and what they
    cost readers. Those are the files a reader of one bucket opens (the read amplification, at most and on
    average over the buckets), when the oldest level-0 file was committed (level 0 waits for clustering), and the bytes
    of removed files still kept for the retained history."""

    files: int = 0
    bytes: int = 0
    by_level: dict[str, tuple[int, int]] = field(default_factory=dict)
    max_files_per_bucket: int = 0
    mean_files_per_bucket: float = 0.0
    oldest_l0_ms: int | None = None
    """Commit time (ms since the epoch) of the oldest level-0 file; None when level 0 is empty."""
    history_bytes: int = 0
    """Bytes of the files removed from the table but kept for older versions (tombstones whose size is known)."""

    @classmethod
    def of(cls, snapshot: Snapshot) -> TableHealth:
        by: dict[str, list[int]] = {}
        per_bucket: dict[tuple[str, int], int] = {}
        oldest_l0: int | None = None
        for f in snapshot.files.values():
            key = "base" if f.kind == "base" else f"L{f.level}"
            acc = by.setdefault(key, [0, 0])
            acc[0] += 1
            acc[1] += f.bytes
            bucket = (repr(sorted(f.partition.items())), f.bucket)
            per_bucket[bucket] = per_bucket.get(bucket, 0) + 1
            if key == "L0" and (oldest_l0 is None or f.min_commit_time < oldest_l0):
                oldest_l0 = f.min_commit_time
        counts = list(per_bucket.values())
        return cls(files=len(snapshot.files), bytes=snapshot.total_bytes(),
                   by_level={k: (v[0], v[1]) for k, v in sorted(by.items())},
                   max_files_per_bucket=max(counts, default=0),
                   mean_files_per_bucket=round(sum(counts) / len(counts), 3) if counts else 0.0,
                   oldest_l0_ms=oldest_l0,
                   history_bytes=sum(t.bytes or 0 for t in snapshot.tombstones.values()))

    def layout_measures(self) -> dict[str, int | float | None]:
        """The reader-cost measures stored in a table's layout (see :mod:`maintd.service.store_metrics`)."""
        return {"read_amplification": self.max_files_per_bucket, "mean_files_per_bucket": self.mean_files_per_bucket,
                "oldest_l0_ms": self.oldest_l0_ms, "history_bytes": self.history_bytes}


@dataclass
class TableRunSummary:
    """What one run did to one table."""

    uri: str
    status: str = "ok"
    """ok, nothing (no task planned), dry-run, partial (some tasks committed and something failed: a task, a
    commit group or the reclamation that followed), failed (something failed and nothing committed)."""
    policy: str | None = None
    read_version: int | None = None
    version: int | None = None
    tasks_planned: int = 0
    tasks_committed: int = 0
    tasks_dropped: int = 0
    tasks_failed: int = 0
    conflicts: int = 0
    before: TableHealth = field(default_factory=TableHealth)
    after: TableHealth = field(default_factory=TableHealth)
    bytes_read: int = 0
    bytes_written: int = 0
    seconds: float = 0.0
    error: str | None = None
    error_type: str | None = None
    """The class name of the error that failed the run (``PolicyError``, ``TaskExecutionError``...)."""
    commit_retries: int = 0
    conflict_types: list[str] = field(default_factory=list)
    planned: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    """The planner's decision for every (partition, bucket): action, rule and message."""
    reclaim: dict[str, Any] | None = None
    """The reclamation that followed maintenance (a :class:`~maintd.reclaim.ReclaimReport`), if one ran."""
    engine: str | None = None
    """Where the run's rewrites executed: ``spark``, or ``in-process`` (threads of the process that planned
    them: a plan of at most ``spark.maintd.inProcess.maxInputBytes``); None when nothing executed."""
    spark_master: str | None = None
    """The master URL of the Spark application that ran the tasks (None: none ran, or they ran in process)."""
    spark_app_id: str | None = None
    """The id of that Spark application (``app-...`` on a standalone cluster, ``local-...`` in local mode)."""
    spark_tasks: int = 0
    """Spark tasks the run was split into (units packed by input size, at least one per core)."""
    spark_retries: int = 0
    """Units that succeeded only in a retried attempt (an executor or Python worker lost, an attempt failed)."""
    commits: list[int] = field(default_factory=list)
    """The versions the run committed: one per group of finished tasks."""

    @property
    def ok(self) -> bool:
        return self.status in ("ok", "nothing", "dry-run")

    def failed_after(self) -> str:
        """The status of a run in which something failed: ``partial`` when some task committed, else ``failed``
        (a run that committed nothing did nothing, whatever else it planned)."""
        return "partial" if self.tasks_committed else "failed"

    def reclamation_failed(self, exc: Exception) -> None:
        """Record the failure of the reclamation that followed maintenance (its own error joins the run's)."""
        self.status = self.failed_after()
        self.error = "; ".join(filter(None, [self.error, f"reclamation: {type(exc).__name__}: {exc}"]))
        self.error_type = self.error_type or type(exc).__name__

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def commit_groups(settings: Any) -> dict[str, Any]:
    """The commit group bounds of the ``commit`` settings group, as execution options (none without settings)."""
    c = getattr(settings, "commit", None)
    if c is None:
        return {}
    return {"commit_max_tasks": c.group_max_tasks, "commit_interval_seconds": c.group_interval_seconds}


def retry_policy(settings: Any) -> RetryPolicy | None:
    """The commit retry bounds of the ``commit`` settings group (None without settings: the table default)."""
    c = getattr(settings, "commit", None)
    if c is None:
        return None
    return RetryPolicy(max_attempts=c.max_attempts, base_delay=c.base_delay_ms / 1000,
                       max_delay=c.max_delay_ms / 1000, total_timeout=c.total_timeout_seconds)


class Runner:
    """Runs maintenance of tables with one policy file and one (lazily created) SparkSession."""

    def __init__(self, settings: Any = None, *, policy_path: str | Path | None = None, spark: Any = None,
                 options: ExecutionOptions | None = None, use_spark: bool = True,
                 progress: Progress | None = None, reclaim: bool = False,
                 session: SessionForRun | None = None,
                 tuned: Callable[[str], Mapping[str, Any] | None] | None = None,
                 budget: Budget | None = None) -> None:
        from maintd.planner.policy_files import load_policy_file

        self.settings = settings
        path = policy_path if policy_path is not None else getattr(getattr(settings, "policy", None), "path", None)
        self.policy_file = load_policy_file(path)
        spark_settings = getattr(settings, "spark", None)
        self.options = options or options_from_settings(spark_settings, **commit_groups(settings))
        self._spark = spark
        self._use_spark = use_spark
        self.retry = retry_policy(settings)
        self._progress = progress or (lambda uri, stage: None)
        self._reclaim = reclaim
        self._session = session
        self.tuned = tuned or (lambda uri: None)
        """The knobs the daemon tuned for a table (nested), applied under its explicit table properties."""
        self.budget = budget
        """The daemon's budget, shared by every run of this Runner (None: unlimited)."""

    @property
    def spark(self) -> Any:
        if self._spark is None and self._use_spark:
            self._spark = spark_session(getattr(self.settings, "spark", None))
        return self._spark

    def _runs_in_process(self, plan: Any, snap: Snapshot) -> bool:
        """Whether ``plan`` runs without a Spark job: only small plans, and only when the session is (or will be)
        one maintd builds itself with a local master (:func:`~maintd.execution.spark.runs_small_plans_in_process`);
        under ``spark-submit`` or in a session the caller gave, every plan runs on that session's cluster."""
        if not runs_in_process(plan, snap, self.options):
            return False
        return runs_small_plans_in_process(self._spark, getattr(self.settings, "spark", None))

    @staticmethod
    def _priority(health: TableHealth, backlog_bytes: int, targets: Targets, now: datetime) -> float:
        """The run's place in the budget's line: how far the table is from its declared targets (those it does
        not declare: the default health score of :func:`~maintd.planner.health.distance_from_targets`)."""
        from maintd.planner.health import distance_from_targets

        return distance_from_targets({**health.layout_measures(), "backlog_bytes": backlog_bytes}, targets, now)

    def _spark_for_run(self) -> AbstractContextManager[Any]:
        """The session for one run that needs Spark: the given one, or the one ``session`` gives (held for the
        run), or one created now."""
        if self._spark is None and self._session is not None:
            return self._session()
        return nullcontext(self.spark)

    def run(self, uris: Sequence[str], *, dry_run: bool = False, now: datetime | None = None
            ) -> list[TableRunSummary]:
        return [self.run_table(uri, dry_run=dry_run, now=now) for uri in uris]

    def run_table(self, uri: str, *, dry_run: bool = False, now: datetime | None = None) -> TableRunSummary:
        """Plan, execute and commit one table; never raises for the table's own failures."""
        started = time.monotonic()
        summary = TableRunSummary(uri=uri)
        try:
            self._run(uri, summary, dry_run, now or datetime.now(UTC))
        except Exception as exc:
            summary.status, summary.error = "failed", f"{type(exc).__name__}: {exc}"
            summary.error_type = type(exc).__name__
            logger.opt(exception=exc).error("table {}: maintenance failed: {}", uri, exc)
            self._progress(uri, "failed")
        if self._reclaim and summary.status != "failed":
            self._reclaim_table(uri, summary, dry_run, now or datetime.now(UTC))
        summary.seconds = round(time.monotonic() - started, 3)
        return summary

    def _reclaim_table(self, uri: str, summary: TableRunSummary, dry_run: bool, now: datetime) -> None:
        """Reclaim after maintenance (``maintd run``): the files maintenance just replaced go once expired."""
        from maintd.reclaim import DEFAULT_ORPHAN_GRACE, reclaim_table

        settings = getattr(self.settings, "reclaim", None)
        grace = timedelta(hours=settings.orphan_grace_hours) if settings is not None else DEFAULT_ORPHAN_GRACE
        try:
            report = reclaim_table(Table.open(uri, retry=self.retry), now=now, orphan_grace=grace, dry_run=dry_run,
                                   force_short_grace=bool(getattr(settings, "force_short_grace", False)))
        except MaintdError as exc:
            summary.reclamation_failed(exc)
            logger.error("table {}: reclamation failed: {}", uri, exc)
            return
        summary.reclaim = report.model_dump(mode="json")
        if not dry_run:
            summary.after = TableHealth.of(Table.open(uri).snapshot())

    def _run(self, uri: str, summary: TableRunSummary, dry_run: bool, now: datetime) -> None:
        from maintd.planner import plan as make_plan

        self._progress(uri, "planning")
        table = Table.open(uri, retry=self.retry)
        snap = table.snapshot()
        snap.check_writable(table.uri)  # a table of a newer protocol: write nothing into it, not even a rewrite
        summary.before = summary.after = TableHealth.of(snap)
        resolved = self.policy_file.resolve(name=snap.metadata.name or "", uri=table.uri,
                                            properties=snap.metadata.properties, tuned=self.tuned(table.uri))
        summary.policy = resolved.name
        plan = make_plan(snap, resolved.policy, now, table.uri)
        summary.read_version, summary.tasks_planned = plan.read_version, len(plan.tasks)
        summary.planned = [{"task_id": t.task_id, "kind": t.kind, "bucket": t.bucket, "partition": t.partition,
                            "files": len(t.inputs), "bytes": t.input_bytes, "reason": t.reason} for t in plan.tasks]
        summary.decisions = [d.model_dump(mode="json") for d in plan.decisions]
        if dry_run or not plan.tasks:
            summary.status = "dry-run" if dry_run else "nothing"
            self._progress(uri, "done")
            return
        self._progress(uri, "executing")
        local = not self._use_spark or self._runs_in_process(plan, snap)
        with nullcontext(None) if local else self._spark_for_run() as spark:
            report = run_plan(plan, table, spark, self.options, commit=True,
                              before_commit=lambda: self._progress(uri, "committing"), budget=self.budget,
                              priority=self._priority(summary.before, plan.input_bytes, resolved.policy.target,
                                                      now))
        results, outcome = report.results, report.outcome
        assert outcome is not None
        summary.spark_master, summary.spark_app_id = report.master, report.app_id
        summary.engine = report.engine
        summary.spark_tasks, summary.commits = report.spark_tasks, list(outcome.versions)
        summary.spark_retries = report.retried
        summary.version, summary.conflicts = outcome.version, outcome.conflicts
        summary.tasks_committed, summary.tasks_dropped = len(outcome.committed), len(outcome.dropped)
        summary.tasks_failed = len(outcome.failed)
        summary.commit_retries, summary.conflict_types = outcome.retries, list(outcome.conflict_types)
        done = [r for r in results if r.task_id in set(outcome.committed)]
        summary.bytes_read = sum(r.bytes_read for r in done)
        summary.bytes_written = sum(r.bytes_written for r in done)
        summary.after = TableHealth.of(table.snapshot())
        errors = [r.error.splitlines()[0] for r in results if not r.ok and r.error] + (
            [outcome.error] if outcome.error else [])
        if outcome.failed or outcome.error:
            summary.status = summary.failed_after()
        if outcome.error_type or outcome.failed:
            summary.error_type = outcome.error_type or "TaskExecutionError"
        summary.error = "; ".join(errors) or None
        self._progress(uri, "done" if summary.ok else "failed")
