"""Shared fixtures: one SparkSession for the whole test session (created only when a test asks for it), the S3 and
Azure servers, and ``table_store``: the store a table lives on, each test taking it run on local disk, S3 and Azure."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import freezegun
import pytest
from stores import STORES, TableStore

# pytest times each phase with its own module's clock; a fixture that yields inside freeze_time would otherwise
# make that phase's duration the frozen instant minus a real one
freezegun.configure(extend_ignore_list=["_pytest.timing"])


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from maintd.execution import spark_session
    from maintd.settings import SparkSettings

    # maintd's worker daemon is opt-in (spark.worker_daemon); the shared session turns it on, so that every Spark
    # test runs through it as well (the default, PySpark's own daemon, runs in the cluster and subprocess tests)
    session = spark_session(SparkSettings(worker_daemon=True),
                            conf={"spark.master": "local[2]", "spark.driver.memory": "1g",
                                  "spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One moto S3 server on a free loopback port for the whole session (stopped at the end)."""
    from s3server import S3Server

    server = S3Server(tmp_path_factory.mktemp("moto"))
    yield server
    server.stop()


@pytest.fixture
def s3_root(s3_server: Any) -> Iterator[str]:
    """A fresh bucket on the session's S3 server, its storage options registered: ``s3://bucket``."""
    from maintd.storage import clear_storage_options, configure_storage

    bucket = s3_server.create_bucket()
    root = f"s3://{bucket}"
    configure_storage(root, s3_server.options)
    yield root
    clear_storage_options()


@pytest.fixture(scope="session")
def azure_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One Azurite Blob server on a free loopback port for the whole session (stopped at the end).

    Without Azurite installed (``npm ci --prefix tests/azurite``) the Azure tests are skipped, unless
    ``MAINTD_TEST_REQUIRE_AZURITE=1`` (``.ci/run`` sets it): then they fail, so CI never passes without them.
    """
    from azureserver import AzureServer, azurite_command

    command = azurite_command()
    if command is None:
        message = "Azurite is not installed: npm ci --prefix tests/azurite (or set MAINTD_AZURITE)"
        if os.environ.get("MAINTD_TEST_REQUIRE_AZURITE") == "1":
            pytest.fail(message)
        pytest.skip(message)
    server = AzureServer(tmp_path_factory.mktemp("azurite"), command)
    yield server
    server.stop()


@pytest.fixture
def azure_root(azure_server: Any) -> Iterator[str]:
    """A fresh container on the session's Azurite server, its storage options registered: ``az://container``."""
    from maintd.storage import clear_storage_options, configure_storage

    container = azure_server.create_container()
    root = f"az://{container}"
    configure_storage(root, azure_server.options)
    yield root
    clear_storage_options()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--store", action="append", choices=STORES, default=[],
                     help="run the table_store tests on this store only (repeatable; tests without it run as usual)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test taking ``table_store`` runs on every store, or on those its ``stores`` marker names."""
    if "table_store" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("stores")
    names = marker.args if marker else STORES
    unknown = set(names) - set(STORES)
    if unknown:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: unknown stores {sorted(unknown)}; known: {STORES}")
    metafunc.parametrize("table_store", names, indirect=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--store NAME``: the ``table_store`` tests of the other stores deselected."""
    chosen = config.getoption("store")
    if not chosen:
        return
    kept, dropped = [], []
    for item in items:
        store = getattr(getattr(item, "callspec", None), "params", {}).get("table_store")
        (dropped if store is not None and store not in chosen else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture
def table_store(request: pytest.FixtureRequest, tmp_path: Path) -> TableStore:
    """A fresh root for tables on the store of the test's parameter: a directory, a bucket of the session's S3
    server or a container of its Azurite server, the storage options registered (see tests/stores.py)."""
    name = request.param
    if name == "local":
        root = tmp_path / "store"
        root.mkdir()
        return TableStore("local", str(root))
    if name == "s3":
        server = request.getfixturevalue("s3_server")
        return TableStore("s3", request.getfixturevalue("s3_root"), server.options, server.env,
                          server.options["aws_secret_access_key"], server)
    server = request.getfixturevalue("azure_server")
    return TableStore("azure", request.getfixturevalue("azure_root"), server.options, server.env,
                      server.options["azure_storage_account_key"], server)


@pytest.fixture(autouse=True)
def _no_commit_lock_left_behind() -> Iterator[None]:
    """Opening a state store makes it the process's commit lock: each test starts and ends without one,
    so that a store opened by one test never serves (or hides the absence of) another test's lock."""
    from maintd.storage import install_commit_lock

    install_commit_lock(None)
    yield
    install_commit_lock(None)
