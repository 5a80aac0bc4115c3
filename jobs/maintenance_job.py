"""Run maintenance as a Spark application: ``spark-submit`` it with the master and resources you choose.

    spark-submit [--master ...] jobs/maintenance_job.py --table URI [--table URI ...] --output summary.json
    spark-submit [--master ...] jobs/maintenance_job.py --plan plan.json --output results.json [--commit]

``--plan`` and ``--output`` are paths or URIs of any storage maintd supports (``s3://bucket/runs/plan.json``,
``gs://``, ``az://``, ``file://``), read and written with the storage options of the driver's environment: a
driver in cluster mode has no disk the user can read.

With ``--table`` the job plans, executes and commits each table as ``maintd run`` does (finished buckets
committed in groups as they finish) and writes the run summaries (``maintd run --json``). With ``--plan``
it executes one plan (``maintd plan --json``): without ``--commit`` it only writes the new files and reports
them, and the caller commits (``maintd.execution.commit_rewrites``); with ``--commit`` it commits them in
groups as they finish and the output holds the commit outcome.

The job runs on the session ``spark-submit`` configured: its master and deploy settings stand, whatever
the ``spark`` section of the maintd settings says (``--config``; its ``spark.conf`` entries
``spark.maintd.*`` still set the task memory and sizes, and its ``commit`` and ``policy`` sections apply).
Every plan runs as Spark jobs of that session, whatever its size (the output names the engine and the master).
The job code is the same code the daemon runs in its long-lived SparkSession.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--table", action="append", help="table URI to maintain (repeatable)")
    what.add_argument("--plan", help="plan JSON to execute: a path or a URI (s3://, gs://, az://, file://)")
    parser.add_argument("--output", required=True,
                        help="JSON to write (summaries, or results): a path or a URI (s3://, gs://, az://, file://)")
    parser.add_argument("--commit", action="store_true", help="with --plan: commit the rewrites as well")
    parser.add_argument("--policy", default=None, help="with --table: policy YAML (default: settings, packaged)")
    parser.add_argument("--no-reclaim", action="store_true", help="with --table: skip reclamation")
    parser.add_argument("--config", default=None, help="maintd settings YAML")
    args = parser.parse_args(argv)

    from maintd.execution import spark_session
    from maintd.settings import load_settings
    from maintd.storage.documents import write_document

    settings = load_settings(args.config)
    from maintd.service.logging import configure_logging

    configure_logging(settings.logging)  # never loguru's defaults: they print the values of variables
    spark = spark_session(settings.spark)
    if args.table:
        ok, out = _run_tables(settings, spark, args)
    else:
        ok, out = _run_plan(settings, spark, args)
    write_document(args.output, json.dumps(out, indent=2, default=str).encode())
    return 0 if ok else 1


def _run_tables(settings: Any, spark: Any, args: argparse.Namespace) -> tuple[bool, Any]:
    from maintd.execution.runner import Runner

    runner = Runner(settings, policy_path=args.policy, spark=spark, reclaim=not args.no_reclaim)
    summaries = runner.run(args.table)
    return all(s.ok for s in summaries), [s.to_dict() for s in summaries]


def _run_plan(settings: Any, spark: Any, args: argparse.Namespace) -> tuple[bool, Any]:
    from maintd.execution import options_from_settings, run_plan
    from maintd.execution.runner import commit_groups
    from maintd.execution.specs import PlanDoc
    from maintd.storage.documents import read_document
    from maintd.table import Table

    plan = PlanDoc.of(read_document(args.plan))
    table = Table.open(plan.table_uri)
    options = options_from_settings(settings.spark, **commit_groups(settings))
    report = run_plan(plan, table, spark, options, commit=args.commit)
    out: dict[str, object] = {"table_uri": plan.table_uri, "read_version": plan.read_version,
                              "engine": report.engine, "spark_master": report.master, "spark_app_id": report.app_id,
                              "spark_tasks": report.spark_tasks,
                              "results": [json.loads(r.model_dump_json()) for r in report.results]}
    ok = all(r.ok for r in report.results)
    if report.outcome is not None:
        out["commit"] = report.outcome.to_dict()
        ok = ok and report.outcome.error is None
    return ok, out


if __name__ == "__main__":
    sys.exit(main())
