"""Every table command of the CLI on an S3 table, the store reached through the standard AWS environment.

``maintd run`` through Spark on S3 is in tests/execution/test_run_stores.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.acero  # imported before freezegun swaps datetime.date, which its C module checks on import
import pytest
from freezegun import freeze_time
from typer.testing import CliRunner

from maintd import Table
from maintd.cli import app
from maintd.storage import clear_storage_options

runner = CliRunner()
POLICY = "default:\n  compaction:\n    max_delta_files: 2\n    min_interval_hours: 0\n"


@pytest.fixture
def s3_env(s3_server: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    """A bucket reached only through the AWS environment variables (no options registered in-process)."""
    bucket = s3_server.create_bucket()
    clear_storage_options()
    for k, v in s3_server.env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("MAINTD_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    yield f"s3://{bucket}"


def invoke(*args: str) -> Any:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, f"{args}: {result.output}"
    return result


def test_table_commands_on_s3(s3_env: str, s3_server: Any, tmp_path: Path) -> None:
    uri = f"{s3_env}/wh/t"
    invoke("table", "create", uri, "--schema", "id:int64!,name:string,ds:string", "--primary-key", "id",
           "--partition-by", "ds", "--buckets", "2")
    table = Table.open(uri)
    # commits ten minutes apart (freezegun moves the commit times only; the S3 client signs with the real clock):
    # five commits within a second would make `simulate` replay a writer of 400,000 commits a day
    with freeze_time(datetime.now(UTC)) as clock:
        for i in range(5):
            table.upsert(pa.table({"id": [i, i + 10], "name": [f"n{i}", "x"], "ds": ["a", "b"]}))
            clock.tick(600)
    outputs = [
        invoke("table", "describe", uri, "--json").stdout,
        invoke("table", "set-properties", uri, "--property", "acid.data.retain.hours=24").stdout,
        invoke("table", "history", uri).stdout,
        invoke("read", uri, "--json").stdout,
        invoke("read", uri, "--version", "2", "--json").stdout,
        invoke("read", uri, "--changes-from", "1", "--changes-to", "3", "--json").stdout,
    ]
    assert json.loads(outputs[0])["version"] == 5
    assert Table.open(uri).snapshot().metadata.properties["acid.data.retain.hours"] == "24"
    rows = json.loads(outputs[3])
    assert sorted(r["id"] for r in rows) == [0, 1, 2, 3, 4, 10, 11, 12, 13, 14]
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    plan = invoke("plan", uri, "--policy", str(policy), "--json").stdout
    assert uri in plan
    outputs += [plan, invoke("simulate", uri, "--days", "1", "--json").stdout,
                invoke("gc", uri, "--dry-run").stdout, invoke("purge", uri, "--yes").stdout]
    assert Table.open(uri).history()[0].operation == "PURGE"
    assert s3_server.options["aws_secret_access_key"] not in "".join(outputs)


def test_a_bad_s3_uri_is_a_clear_cli_error(s3_env: str) -> None:
    result = runner.invoke(app, ["table", "describe", "s3://no-such-bucket-at-all/t"])
    assert result.exit_code == 2 and "bucket does not exist" in result.output, result.output
