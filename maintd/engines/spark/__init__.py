"""The ``maintd`` Spark data source (Spark 4 Python Data Source API): batch reads with time travel and
the change feed, batch writes, and exactly-once streaming writes.

``register(spark)`` makes ``format("maintd")`` known to a session; maintd's own sessions
(:func:`maintd.execution.spark_session`) are registered already.
"""

from __future__ import annotations

from typing import Any

from maintd.engines.spark.dataframes import create_temp_view, save
from maintd.engines.spark.source import SOURCE_NAME, MaintdDataSource

FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
"""Spark >= 4.1 pushes a query's filters into Python data sources only with this set."""


def register(spark: Any) -> None:
    """Register the ``maintd`` format with ``spark`` (a classic or a Spark Connect session).

    From Spark 4.1 on it also enables filter pushdown into Python data sources, so that a query's
    filters on partition and key columns prune buckets and files.
    """
    spark.dataSource.register(MaintdDataSource)
    major, minor = (int(x) for x in spark.version.split(".")[:2])
    if (major, minor) >= (4, 1):
        spark.conf.set(FILTER_PUSHDOWN_CONF, "true")


__all__ = ["SOURCE_NAME", "MaintdDataSource", "create_temp_view", "register", "save"]
