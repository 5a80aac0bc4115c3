"""``maintd run`` on S3 through Spark, and discovery under an ``s3://`` root.

The Spark tasks open the table on the store themselves: the options registered in the driver (endpoint,
credentials) reach the Python workers carried by the task, not through their environment.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from maintd import Table
from maintd.service.discovery import discover, tables_of

from .helpers import SCHEMA, Model, batch, sorted_read
from .test_runner import POLICY, _app


def s3_table(uri: str, commits: int = 8) -> tuple[Table, Model]:
    table = Table.create(uri, SCHEMA, primary_key="id", buckets=2)
    model = Model()
    rng = np.random.default_rng(3)
    for _ in range(commits):
        b = batch(rng, 100, 300)
        table.write_changes(b, "op")
        model.apply(b)
    return table, model


def test_tables_are_discovered_under_an_s3_root(s3_root: str) -> None:
    for uri in (f"{s3_root}/wh/a", f"{s3_root}/wh/db/b", f"{s3_root}/wh/db/deeper/c"):
        Table.create(uri, "id:int64!", primary_key="id")
    expected = [f"{s3_root}/wh/a", f"{s3_root}/wh/db/b", f"{s3_root}/wh/db/deeper/c"]
    assert tables_of(discover([f"{s3_root}/wh"])) == expected
    assert tables_of(discover([f"{s3_root}/wh"], max_depth=1)) == [f"{s3_root}/wh/a"]
    assert tables_of(discover([f"{s3_root}/empty"])) == []


@pytest.mark.spark
@pytest.mark.parametrize("engine", ["spark", "in-process"])
def test_maintd_run_through_spark_on_s3(s3_root: str, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        engine: str) -> None:
    assert not any(k.startswith("AWS_ACCESS") for k in os.environ), "the options must reach Spark by the task"
    table, model = s3_table(f"{s3_root}/wh/run-{engine}")
    files_before = len(table.snapshot().files)
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    monkeypatch.setenv("MAINTD_STATE_DIR", str(tmp_path / "state"))
    if engine == "spark":  # the table is small: it would run in process otherwise
        monkeypatch.setenv("MAINTD_SPARK__CONF", json.dumps({"spark.maintd.inProcess.maxInputBytes": "0"}))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(_app(), ["run", table.uri, "--policy", str(policy), "--json"])
    assert result.exit_code == 0, result.output
    [summary] = json.loads(result.stdout)
    assert summary["status"] == "ok" and summary["tasks_committed"] > 0, summary
    assert summary["engine"] == engine and summary["spark_tasks"] >= 1
    if engine == "spark":
        assert summary["spark_app_id"].startswith("local-")
    else:
        assert summary["spark_app_id"] is None
    fresh = Table.open(table.uri)
    assert len(fresh.snapshot().files) < files_before
    assert sorted_read(fresh).equals(model.table())
    assert "testing-secret-key" not in result.output
