"""Execution: run a maintenance plan's tasks on Spark (or locally) and commit their rewrites.

Plan -> units (:func:`task_specs`: a large compaction split into key ranges) -> Spark tasks that follow
the cluster (:mod:`maintd.execution.scheduler`, pyarrow inside the tasks) -> commits in groups as tasks
finish (:class:`IncrementalCommitter`), or all at once (:func:`commit_rewrites`). :func:`run_plan` strings
them together; :mod:`maintd.execution.runner` adds planning and summaries for ``maintd run``.
"""

from maintd.execution.commit import CommitOutcome, IncrementalCommitter, commit_rewrites, discard_outputs
from maintd.execution.driver import ExecutionReport, execute, run_plan
from maintd.execution.rewrite import run_pack, run_pack_json, run_task, run_task_json
from maintd.execution.scheduler import LocalBackend, SparkBackend, pack_tasks, run_units
from maintd.execution.spark import options_from_settings, spark_info, spark_session, warm_up
from maintd.execution.specs import ExecutionOptions, PlanDoc, PlanTaskDoc, TaskResult, TaskSpec
from maintd.execution.units import combine, task_specs

__all__ = [
    "CommitOutcome",
    "ExecutionOptions",
    "ExecutionReport",
    "IncrementalCommitter",
    "LocalBackend",
    "PlanDoc",
    "PlanTaskDoc",
    "SparkBackend",
    "TaskResult",
    "TaskSpec",
    "combine",
    "commit_rewrites",
    "discard_outputs",
    "execute",
    "options_from_settings",
    "pack_tasks",
    "run_pack",
    "run_pack_json",
    "run_plan",
    "run_task",
    "run_task_json",
    "run_units",
    "spark_info",
    "spark_session",
    "task_specs",
    "warm_up",
]
