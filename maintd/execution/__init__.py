"""Execution: run a maintenance plan's tasks on Spark (or locally) and commit their rewrites.

Plan -> :func:`execute` (plan tasks packed into one Spark task per core, pyarrow inside the tasks)
-> :func:`commit_rewrites` (one conflict-checked transaction per table). :mod:`maintd.execution.runner`
strings them together for ``maintd run``.
"""

from maintd.execution.commit import CommitOutcome, commit_rewrites, discard_outputs
from maintd.execution.rewrite import run_pack, run_pack_json, run_task, run_task_json
from maintd.execution.spark import (
    execute,
    options_from_settings,
    pack_tasks,
    run_local,
    run_on_spark,
    spark_session,
    warm_up,
)
from maintd.execution.specs import ExecutionOptions, PlanDoc, PlanTaskDoc, TaskResult, TaskSpec, task_specs

__all__ = [
    "CommitOutcome",
    "ExecutionOptions",
    "PlanDoc",
    "PlanTaskDoc",
    "TaskResult",
    "TaskSpec",
    "commit_rewrites",
    "discard_outputs",
    "execute",
    "options_from_settings",
    "pack_tasks",
    "run_local",
    "run_on_spark",
    "run_pack",
    "run_pack_json",
    "run_task",
    "run_task_json",
    "spark_session",
    "task_specs",
    "warm_up",
]
