"""Shared fixtures: one SparkSession for the whole test session (created only when a test asks for it)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


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


@pytest.fixture(autouse=True)
def _no_commit_lock_left_behind() -> Iterator[None]:
    """Opening a state store makes it the process's commit lock: each test starts and ends without one,
    so that a store opened by one test never serves (or hides the absence of) another test's lock."""
    from maintd.storage import install_commit_lock

    install_commit_lock(None)
    yield
    install_commit_lock(None)
