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

    session = spark_session(conf={"spark.master": "local[2]", "spark.driver.memory": "1g",
                                  "spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"})
    yield session
    session.stop()
