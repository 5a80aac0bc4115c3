"""``maintd run`` through Spark and in process on S3 and Azure, and discovery under a root of every store.

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
from stores import TableStore
from typer.testing import CliRunner

from maintd import Table
from maintd.service.discovery import discover, tables_of

from .helpers import SCHEMA, Model, batch, sorted_read
from .test_runner import POLICY, _app


def written_table(uri: str, commits: int = 8) -> tuple[Table, Model]:
    """A table of two buckets at ``uri`` with ``commits`` random batches of changes, and its model."""
    table = Table.create(uri, SCHEMA, primary_key="id", buckets=2)
    model = Model()
    rng = np.random.default_rng(3)
    for _ in range(commits):
        b = batch(rng, 100, 300)
        table.write_changes(b, "op")
        model.apply(b)
    return table, model


def test_tables_are_discovered_under_a_root(table_store: TableStore) -> None:
    root = table_store.root
    for uri in (f"{root}/wh/a", f"{root}/wh/db/b", f"{root}/wh/db/deeper/c"):
        Table.create(uri, "id:int64!", primary_key="id")
    expected = [f"{root}/wh/a", f"{root}/wh/db/b", f"{root}/wh/db/deeper/c"]
    assert tables_of(discover([f"{root}/wh"])) == expected
    assert tables_of(discover([f"{root}/wh"], max_depth=1)) == [f"{root}/wh/a"]
    assert tables_of(discover([f"{root}/empty"])) == []


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.stores("s3", "azure")  # on local disk: test_runner.py
@pytest.mark.parametrize("engine", ["spark", "in-process"])
def test_maintd_run_through_spark_or_in_process(table_store: TableStore, spark: Any, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch, engine: str) -> None:
    assert table_store.secret not in os.environ.values(), "the options must reach Spark by the task"
    assert not any(k.startswith(("AWS_ACCESS", "AZURE_STORAGE_ACCOUNT")) for k in os.environ)
    table, model = written_table(f"{table_store.root}/wh/run-{engine}")
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
    assert table_store.secret and table_store.secret not in result.output, "the secret never shows"
