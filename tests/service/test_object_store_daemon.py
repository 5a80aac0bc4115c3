"""The daemon on object stores (a moto S3 server): discovery under s3:// roots, and every storage error of a
root or a table reported once, marked unhealthy in the store, /metrics, /readyz and `maintd status`, while
the daemon goes on with the other tables."""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from servers import free_port
from waiting import wait_until

from maintd.redaction import forget_secrets
from maintd.service.daemon import Daemon
from maintd.service.discovery import scan_root
from maintd.service.http import HealthServer
from maintd.service.jobs import NotReadyError, TableJobs
from maintd.service.metrics import Metrics
from maintd.service.records import RunKind, RunStatus
from maintd.service.store import StateStore
from maintd.settings import Settings, apply_storage_settings
from maintd.storage import clear_storage_options

from .warehouse import Model, batch

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


@pytest.fixture(autouse=True)
def _clean_options() -> Iterator[None]:
    clear_storage_options()
    yield
    clear_storage_options()
    forget_secrets()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    opened = StateStore(f"sqlite:///{tmp_path / 'maintd.db'}")
    yield opened
    opened.close()


def s3_table(uri: str, commits: int = 3) -> Any:
    import numpy as np

    from maintd import Table

    table = Table.create(uri, "id:int64!,name:string,amount:float64", primary_key="id", buckets=2,
                         name=uri.rsplit("/", 1)[-1])
    rng, model = np.random.default_rng(1), Model()
    for _ in range(commits):
        b = batch(rng)
        table.write_changes(b, "op")
        model.apply(b)
    return table


def settings_of(tmp_path: Path, s3: Any, *, roots: list[str], tables: list[str] | None = None,
                prefixes: dict[str, dict[str, str]] | None = None) -> Settings:
    return Settings.model_validate({
        "state_dir": str(tmp_path / "state"),
        "warehouse": {"roots": roots, "tables": tables or [], "storage_options": s3.options,
                      "prefix_storage_options": prefixes or {}},
        "store": {"lease_duration_seconds": 30, "lease_renew_interval_seconds": 5},
        "scheduler": {"jitter_seconds": 0, "retry_backoff_base_seconds": 1, "retry_backoff_max_seconds": 2},
    })


def closed_endpoint() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nothing listens there: connection refused


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_discovery_lists_tables_under_an_s3_root_level_by_level(s3_server: Any, tmp_path: Path) -> None:
    bucket = s3_server.create_bucket()
    settings = settings_of(tmp_path, s3_server, roots=[f"s3a://{bucket}/wh"], prefixes={f"s3://{bucket}": {}})
    apply_storage_settings(settings)
    s3_table(f"s3://{bucket}/wh/sales/orders", commits=1)
    s3_table(f"s3://{bucket}/wh/customers", commits=1)
    s3_table(f"s3://{bucket}/wh/a/b/c/d/too_deep", commits=0)
    s3_table(f"s3://{bucket}/elsewhere/t", commits=0)
    scan = scan_root(f"s3a://{bucket}/wh", max_depth=3)
    assert scan.ok and scan.error is None
    assert scan.tables == (f"s3a://{bucket}/wh/customers", f"s3a://{bucket}/wh/sales/orders")
    assert scan_root(f"s3://{bucket}/wh/customers").tables == (f"s3://{bucket}/wh/customers",), "a root that is a table"
    assert scan_root(f"s3://{bucket}/empty").tables == ()


@pytest.mark.parametrize("case", ["missing bucket", "closed port", "no credentials"])
def test_a_root_that_cannot_be_searched_gets_one_error_naming_it_and_what_to_set(
    case: str, s3_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    bucket = s3_server.create_bucket()
    root, options = f"s3://{bucket}/wh", dict(s3_server.options)
    if case == "missing bucket":
        root = "s3://no-such-bucket-here/wh"
        expected, what = "BucketNotFoundError", "the bucket does not exist"
    elif case == "closed port":
        options["aws_endpoint"] = closed_endpoint()
        expected, what = "StorageUnreachableError", "AWS_ENDPOINT_URL"
    else:
        del options["aws_access_key_id"], options["aws_secret_access_key"]
        expected, what = "StorageCredentialsError", "AWS_ACCESS_KEY_ID"
    settings = Settings.model_validate({"state_dir": str(tmp_path), "warehouse": {"roots": [root],
                                                                                   "storage_options": options}})
    apply_storage_settings(settings)
    scan = scan_root(root)
    assert not scan.ok and scan.tables == ()
    assert scan.error_type == expected, scan.error
    assert scan.error is not None and scan.error.startswith(f"warehouse root {root} cannot be searched")
    assert what in scan.error and "\n" not in scan.error
    assert s3_server.options["aws_secret_access_key"] not in scan.error


def test_the_daemon_maintains_s3_tables_and_marks_a_failing_root_and_table_unhealthy(
    s3_server: Any, tmp_path: Path, store: StateStore
) -> None:
    good_bucket = s3_server.create_bucket()
    gone_bucket = s3_server.create_bucket()
    good_root, bad_root = f"s3://{good_bucket}/wh", "s3://bucket-that-never-was/wh"
    gone_table = f"s3://{gone_bucket}/wh/orders"
    unreachable_root = f"s3://{good_bucket}/offline"
    settings = settings_of(tmp_path, s3_server, roots=[good_root, bad_root, unreachable_root], tables=[gone_table],
                           prefixes={unreachable_root: {"aws_endpoint": closed_endpoint(), "timeout": "5s"}})
    apply_storage_settings(settings)
    table = s3_table(f"{good_root}/orders", commits=8)
    s3_table(gone_table, commits=1)
    _delete_bucket(s3_server, gone_bucket)

    metrics = Metrics()
    jobs = TableJobs(settings, store, metrics)
    daemon = Daemon(settings, store, jobs.maintain, jobs.reclaim, discover=jobs.discover, metrics=metrics)
    try:
        started = daemon.run_pass(RunKind.MAINTENANCE)
        assert set(started) == {table.uri, gone_table}
        wait_until(lambda: not daemon._snapshot(), "the runs to finish", timeout=120)
    finally:
        daemon.stop(grace_seconds=30)

    rows = {t.uri: t for t in store.list_tables()}
    assert set(rows) == {table.uri, gone_table}, "the failing roots registered nothing"
    assert rows[table.uri].last_status in (RunStatus.SUCCEEDED, RunStatus.SKIPPED)
    assert rows[table.uri].consecutive_failures == 0
    assert rows[gone_table].consecutive_failures == 1
    assert "the bucket does not exist" in (rows[gone_table].last_error or "")
    roots = {r.uri: r for r in store.list_roots()}
    assert roots[good_root].healthy and roots[good_root].tables == 1
    assert roots[bad_root].error_type == "BucketNotFoundError" and roots[bad_root].failures == 1
    assert roots[unreachable_root].error_type == "StorageUnreachableError"

    assert sample(metrics, "maintd_root_healthy", root=good_root) == 1
    assert sample(metrics, "maintd_root_healthy", root=bad_root) == 0
    assert sample(metrics, "maintd_root_healthy", root=unreachable_root) == 0
    assert sample(metrics, "maintd_table_healthy", table=table.uri) == 1
    assert sample(metrics, "maintd_table_healthy", table=gone_table) == 0
    assert sample(metrics, "maintd_run_failures_total", kind="maintenance", error="BucketNotFoundError") == 1
    assert jobs.warehouse_ready() is True, "one root answers: the daemon is ready, the others show as failing"
    secret = s3_server.options["aws_secret_access_key"]
    assert secret not in json.dumps([r.error for r in roots.values()]) + (rows[gone_table].last_error or "")


def test_readyz_fails_while_every_root_fails_and_no_table_is_registered(
    s3_server: Any, tmp_path: Path, store: StateStore
) -> None:
    root = "s3://missing-bucket-for-readyz/wh"
    settings = settings_of(tmp_path, s3_server, roots=[root])
    apply_storage_settings(settings)
    jobs = TableJobs(settings, store, Metrics())
    assert jobs.warehouse_ready() is True, "not searched yet"
    assert jobs.discover() == []
    with pytest.raises(NotReadyError, match="every warehouse root failed"):
        jobs.warehouse_ready()
    with HealthServer(Metrics(), {"warehouse": jobs.warehouse_ready}) as server:
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(f"{server.url}/readyz", timeout=10)
        body = json.loads(caught.value.read())
        assert caught.value.code == 503 and body["ready"] is False
        assert root in body["failing"]["warehouse"] and "the bucket does not exist" in body["failing"]["warehouse"]
    # the bucket appears: the next pass searches the failing root again at once and the daemon becomes ready
    bucket = root.split("/")[2]
    s3_server.create_bucket(bucket)
    s3_table(f"{root}/t", commits=0)
    assert jobs.discover() == [f"{root}/t"]
    assert jobs.warehouse_ready() is True
    assert store.list_roots()[0].healthy


def _delete_bucket(s3_server: Any, bucket: str) -> None:
    import obstore
    from obstore.store import S3Store

    opts = s3_server.options
    s3 = S3Store(bucket, config={"endpoint": opts["aws_endpoint"], "access_key_id": opts["aws_access_key_id"],
                                 "secret_access_key": opts["aws_secret_access_key"], "region": opts["aws_region"]},
                 client_options={"allow_http": True})
    paths = [m["path"] for chunk in obstore.list(s3) for m in chunk]
    obstore.delete(s3, paths)
    urllib.request.urlopen(urllib.request.Request(f"{opts['aws_endpoint']}/{bucket}", method="DELETE"),
                           timeout=10).close()


def test_the_kubernetes_example_config_maintains_an_s3_table_with_credentials_from_the_environment(
    s3_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """config/maintd.k8s.yaml as the pod runs it: AWS_* from the environment (the chart's Secret), the bucket
    `lake`, a table found under s3a://lake/warehouse and maintained."""
    from maintd.settings import load_settings

    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("MAINTD_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("MAINTD_STORE__URL", f"sqlite:///{tmp_path / 'maintd.db'}")
    settings = load_settings(Path(__file__).resolve().parents[2] / "config" / "maintd.k8s.yaml")
    settings.store.db_schema = None  # a PostgreSQL schema in the example; SQLite here
    assert settings.warehouse.roots == ["s3a://lake/warehouse"]
    apply_storage_settings(settings)
    with contextlib.suppress(urllib.error.HTTPError):  # another test may have created it
        s3_server.create_bucket("lake")
    name = f"orders_{uuid.uuid4().hex[:8]}"
    table = s3_table(f"s3://lake/warehouse/sales/{name}", commits=4)
    store = StateStore(settings.store.url)
    try:
        jobs = TableJobs(settings, store, Metrics())
        found = jobs.discover()
        assert f"s3a://lake/warehouse/sales/{name}" in found
        result = jobs.maintain(f"s3a://lake/warehouse/sales/{name}")
        assert result.status in (RunStatus.SUCCEEDED, RunStatus.SKIPPED), result.error
        assert result.layout is not None and result.layout["files"] == len(table.snapshot().files)
        assert store.list_roots()[0].healthy
    finally:
        store.close()
