"""Every CLI command on a table in S3 (a moto server) answers as on local disk, and every bad storage input
(unknown scheme, missing bucket, missing credentials, unreachable endpoint) is one line, with exit code 2 (an
unreachable endpoint: 1, the storage failed; README, "Exit codes")."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from servers import free_port

from maintd import Table
from maintd.redaction import forget_secrets
from maintd.storage import clear_storage_options, configure_storage

SCHEMA = "id:int64!,name:string,amount:float64"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    clear_storage_options()
    yield
    clear_storage_options()
    forget_secrets()


def maintd_cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "maintd", *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MAINTD_"))}
    env.update(AWS_CONFIG_FILE=str(tmp_path / "none"), AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
               AWS_EC2_METADATA_DISABLED="true", MAINTD_STATE_DIR=str(tmp_path / "state"), **extra)
    return env


@pytest.mark.slow
@pytest.mark.spark
def test_the_demo_runs_on_s3(s3_server: Any, s3_root: str, spark: Any) -> None:
    from rich.console import Console

    from maintd.cli.demo import run_demo

    console = Console(record=True, width=160)
    assert run_demo(console, f"{s3_root}/demo", batches=12, rows=100, spark=spark), console.export_text()
    text = console.export_text()
    assert "rows read before and after are identical" in text and f"{s3_root}/demo/orders" in text
    assert Table.open(f"{s3_root}/demo/orders").version > 12


POLICY = "default:\n  compaction:\n    max_delta_files: 2\n    min_interval_hours: 0\n"
_HEX = re.compile(r"\b[0-9a-f]{16}(?:[0-9a-f]{16})?\b")
_TIME = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")
#: Keys whose values differ between any two runs (durations, clocks, Spark application ids, hosts; the bytes of
#: log files, which hold commit times).
_VOLATILE = re.compile(r".*(seconds|_ms$|duration|^time$|_at$|started|ended|spark_app_id|spark_master|holder|"
                       r"leased_by|retry_after|mtime|age|read_speed|throughput|log_bytes).*")


def normalise(value: Any, uri: str) -> Any:
    """``value`` with the table URI, ids, times and volatile fields replaced, so that two tables compare."""
    if isinstance(value, dict):
        return {k: "<volatile>" if _VOLATILE.fullmatch(k) else normalise(v, uri) for k, v in value.items()}
    if isinstance(value, list):
        return [normalise(v, uri) for v in value]
    if isinstance(value, str):
        return " ".join(_TIME.sub("<time>", _HEX.sub("<id>", value.replace(uri, "<T>"))).split())
    return value


def differences(a: Any, b: Any, at: str = "") -> list[str]:
    """Where two JSON documents differ (paths and values), for the failure message."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in differences(a.get(k), b.get(k), f"{at}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{at}[{i}]")]
    return [] if a == b else [f"{at}: {a!r} != {b!r}"]


def write_rows(uri: str) -> None:
    import pyarrow as pa

    table = Table.open(uri)
    for i in range(6):
        table.upsert(pa.table({"id": [i, i + 10], "name": [f"n{i}", "x"], "ds": ["a", "b"]}))
    table.delete(pa.table({"id": [3], "ds": ["a"]}))


@pytest.mark.spark
def test_every_cli_command_answers_on_s3_as_on_local_disk(
    s3_server: Any, tmp_path: Path, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same rows written to a local table and to an S3 table (reached through the settings' storage options,
    none in the environment): every command prints the same thing, up to the URI, ids and clocks.
    (``maintd simulate`` on S3 is in tests/cli/test_cli_s3.py: its minutes of simulation are the same anywhere.)"""
    from typer.testing import CliRunner

    from maintd.cli import app

    for var in [v for v in os.environ if v.startswith(("AWS_", "MAINTD_"))]:
        monkeypatch.delenv(var)
    monkeypatch.chdir(tmp_path)
    bucket = s3_server.create_bucket()
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    runner = CliRunner()
    results: dict[str, list[Any]] = {}
    for side, uri in (("local", str(tmp_path / "local" / "t")), ("s3", f"s3://{bucket}/wh/t")):
        config = tmp_path / f"{side}.yaml"
        options = json.dumps(s3_server.options)
        config.write_text(f"state_dir: {tmp_path / side}\nstore:\n  url: sqlite:///{tmp_path / side}.db\n"
                          f"warehouse:\n  roots: [\"{uri.rsplit('/', 1)[0]}\"]\n  storage_options: {options}\n"
                          f"policy:\n  path: {policy}\n")
        monkeypatch.setenv("MAINTD_CONFIG", str(config))  # the commands without --config read it too
        clear_storage_options()

        def cli(*args: str, uri: str = uri, side: str = side) -> Any:
            result = runner.invoke(app, list(args))
            assert result.exit_code == 0, f"{side} {args}: {result.output}"
            text = result.stdout
            try:
                return normalise(json.loads(text), uri)
            except json.JSONDecodeError:
                return normalise(text, uri)

        out = [cli("table", "create", uri, "--schema", "id:int64!,name:string,ds:string", "--primary-key", "id",
                   "--partition-by", "ds", "--buckets", "2")]
        write_rows(uri)
        out += [
            cli("table", "describe", uri, "--json"),
            cli("table", "set-properties", uri, "--property", "acid.data.retain.hours=1"),
            cli("table", "history", uri, "--json"),
            cli("read", uri, "--json"),
            cli("read", uri, "--version", "3", "--json"),
            cli("read", uri, "--changes-from", "2", "--changes-to", "5", "--json"),
            cli("plan", uri, "--json"),
            cli("run", "--json", "--config", str(config)),  # the warehouse's tables: found under its root
            cli("table", "describe", uri, "--json"),
            cli("read", uri, "--json"),
            cli("status", "--json", "--config", str(config)),
            cli("history", "--json", "--config", str(config)),
            cli("gc", "--dry-run", "--json", "--orphan-grace-hours", "1", "--config", str(config)),
            cli("purge", uri, "--yes", "--json", "--orphan-grace-hours", "1"),
            cli("table", "describe", uri, "--json"),
            cli("read", uri, "--json"),
        ]
        results[side] = out
    names = ["create", "describe", "set-properties", "history", "read", "read --version", "read --changes",
             "plan", "run", "describe after run", "read after run", "status", "history (runs)",
             "gc --dry-run", "purge", "describe after purge", "read after purge"]
    for name, local, s3 in zip(names, results["local"], results["s3"], strict=True):
        assert local == s3, f"maintd {name}: local and S3 differ: {differences(local, s3)}"
    run = results["s3"][8]
    assert run[0]["status"] == "ok" and run[0]["tasks_committed"] > 0, run
    status = results["s3"][11]
    assert status["tables"][0]["health"] == "healthy" and status["tables"][0]["uri"] == "<T>"


BAD_INPUTS = {
    # case: (URI, storage options in the settings, what the one error line must say)
    "unknown scheme": ("hdfs://namenode/wh/t", {}, ["hdfs://namenode/wh/t", "no storage for scheme 'hdfs'", "s3://"]),
    "missing bucket": ("s3://no-such-bucket-anywhere/wh/t", None, ["s3://no-such-bucket-anywhere/wh/t",
                                                                   "the bucket does not exist"]),
    "missing credentials": ("s3://{bucket}/wh/t", {"aws_access_key_id": "", "aws_secret_access_key": ""},
                            ["s3://{bucket}/wh/t", "AWS_ACCESS_KEY_ID"]),
    "unreachable endpoint": ("s3://{bucket}/wh/t", {"aws_endpoint": "CLOSED", "connect_timeout": "2s"},
                             ["s3://{bucket}/wh/t", "cannot be reached", "AWS_ENDPOINT_URL"]),
    "no conditional put": ("s3://{bucket}/wh/t", {"aws_conditional_put": "disabled"},
                           ["s3://{bucket}/wh/t", "conditional put", "commit_lock=state_store"]),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_storage_input_is_one_error_line_with_its_exit_code(case: str, s3_server: Any, tmp_path: Path) -> None:
    bucket = s3_server.create_bucket()
    uri, extra, expected = BAD_INPUTS[case]
    uri = uri.format(bucket=bucket)
    options = {**s3_server.options, **(extra or {})}
    if options.get("aws_endpoint") == "CLOSED":
        options["aws_endpoint"] = f"http://127.0.0.1:{free_port()}"
    options = {k: v for k, v in options.items() if v}
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "maintd.yaml").write_text(
        f"warehouse:\n  storage_options: {json.dumps(options)}\n  prefix_storage_options: "
        f"{json.dumps({uri.rsplit('/', 2)[0]: {}})}\n" if "://" in uri and not uri.startswith("hdfs") else "{}\n")
    env = clean_env(tmp_path)
    command = (["table", "create", uri, "--schema", SCHEMA, "--primary-key", "id"] if case == "no conditional put"
               else ["table", "describe", uri])
    done = maintd_cli(command, env, tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == (1 if case == "unreachable endpoint" else 2), (done.stdout, done.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    for part in expected:
        assert part.format(bucket=bucket) in lines[0], lines[0]
    assert s3_server.options["aws_secret_access_key"] not in done.stderr + done.stdout


def test_maintd_run_reports_a_root_it_cannot_search_and_maintains_the_others(s3_server: Any, tmp_path: Path) -> None:
    """`maintd run` of a warehouse with a root on a missing bucket: the error names the root, the tables of
    the other root are maintained, the exit code is 1."""
    bucket = s3_server.create_bucket()
    good, bad = f"s3://{bucket}/wh", "s3://bucket-gone-missing/wh"
    configure = tmp_path / "maintd.yaml"
    configure.write_text(f"state_dir: {tmp_path / 'state'}\nwarehouse:\n  roots: [\"{good}\", \"{bad}\"]\n"
                         f"  storage_options: {json.dumps(s3_server.options)}\n")
    env = clean_env(tmp_path)
    done = maintd_cli(["run", "--dry-run", "--config", str(configure)], env, tmp_path)
    assert done.returncode == 2 and "cannot be searched" in done.stderr and bad in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    configure_storage(good, s3_server.options)
    Table.create(f"{good}/t", SCHEMA, primary_key="id", buckets=2)
    done = maintd_cli(["run", "--dry-run", "--json", "--config", str(configure)], env, tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert [o["uri"] for o in json.loads(done.stdout)] == [f"{good}/t"]
    assert f"warehouse root {bad} cannot be searched for tables: the bucket does not exist" in done.stderr
    assert "Traceback" not in done.stderr
