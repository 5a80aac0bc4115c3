"""Run one maintenance plan as a Spark application: a plan in JSON in, results in JSON out.

    spark-submit jobs/maintenance_job.py --plan plan.json --output results.json [--commit]

The plan is the planner's ``MaintenancePlan`` as JSON (``maintd plan --json``). Without ``--commit`` the
job only writes the new files and reports them, and the caller commits (``maintd.execution.commit_rewrites``);
with ``--commit`` the job commits too and the output holds the commit outcome. The job code is the same
code the daemon runs in its long-lived SparkSession.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", required=True, help="plan JSON file")
    parser.add_argument("--output", required=True, help="results JSON file to write")
    parser.add_argument("--commit", action="store_true", help="commit the rewrites as well")
    parser.add_argument("--config", default=None, help="maintd settings YAML (spark group and task memory)")
    args = parser.parse_args(argv)

    from maintd.execution import commit_rewrites, execute, options_from_settings, spark_session
    from maintd.execution.specs import PlanDoc
    from maintd.settings import load_settings
    from maintd.table import Table

    settings = load_settings(args.config)
    from maintd.service.logging import configure_logging

    configure_logging(settings.logging)  # never loguru's defaults: they print the values of variables
    plan = PlanDoc.of(Path(args.plan).read_text())
    spark = spark_session(settings.spark)
    table = Table.open(plan.table_uri)
    results = execute(plan, table, spark, options_from_settings(settings.spark))
    out: dict[str, object] = {"table_uri": plan.table_uri, "read_version": plan.read_version,
                              "results": [json.loads(r.model_dump_json()) for r in results]}
    ok = all(r.ok for r in results)
    if args.commit:
        outcome = commit_rewrites(table, plan, results)
        out["commit"] = outcome.to_dict()
        ok = ok and outcome.error is None
    Path(args.output).write_text(json.dumps(out, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
