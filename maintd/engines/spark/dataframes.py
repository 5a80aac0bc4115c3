"""What Spark's ``DataFrameWriter`` and SQL cannot give a Python data source, as two functions.

Spark refuses the save modes ``ErrorIfExists`` (its default) and ``Ignore`` for every Python data source
(``UNSUPPORTED_DATA_SOURCE_SAVE_MODE``, raised by Spark before maintd is asked), and cannot query a Python
data source by path (``SELECT * FROM maintd.`/path```: ``UNSUPPORTED_DATASOURCE_FOR_DIRECT_QUERY``).
:func:`save` applies every save mode as Spark documents it; :func:`create_temp_view` names a table in SQL
(as does ``CREATE TEMPORARY VIEW orders USING maintd OPTIONS (path '/data/orders')``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from loguru import logger

from maintd.engines.spark.source import SOURCE_NAME
from maintd.errors import InvalidInputError, TableExistsError, TableNotFoundError
from maintd.storage import storage_for_uri
from maintd.table.log.tablelog import TableLog

_MODES = {"errorifexists": "errorifexists", "error": "errorifexists", "default": "errorifexists",
          "ignore": "ignore", "append": "append", "overwrite": "overwrite"}


def save(df: Any, uri: str, mode: str = "errorifexists", *, primary_key: Sequence[str] | str | None = None,
         partition_by: Sequence[str] | str = (), buckets: int | None = None,
         options: Mapping[str, Any] | None = None) -> bool:
    """Write ``df`` to the table at ``uri`` with a Spark save mode, as Spark documents them.

    ``errorifexists`` (the default; also ``error``): create the table and write, or raise if one is there.
    ``ignore``: create the table and write, or do nothing if one is there. ``append`` and ``overwrite``: write
    into the table, creating it if absent. Creating needs ``primary_key`` (``partition_by`` and ``buckets``
    optional); ``options`` are the data source's write options (``opColumn``, ``replaceWhere``...).

    Returns:
        Whether anything was written (False: ``ignore`` found a table).

    Raises:
        TableExistsError: ``errorifexists`` and a table is at ``uri`` (nothing written).
        TableNotFoundError: no table and no ``primary_key`` to create one.
    """
    chosen = _MODES.get(str(mode).strip().lower())
    if chosen is None:
        raise InvalidInputError(f"table {uri}: save mode {mode!r} is not one of errorifexists, error, ignore, append, "
                                "overwrite")
    exists = TableLog(storage_for_uri(uri)).is_table()
    if exists and chosen == "errorifexists":
        raise TableExistsError(f"a table already exists at {uri}: nothing written; use mode 'append' to add to it, "
                               "'overwrite' to replace its rows, or 'ignore' to leave it as it is")
    if exists and chosen == "ignore":
        logger.info("table {}: exists; save mode ignore wrote nothing", uri)
        return False
    given = {k: str(v) for k, v in (options or {}).items()}
    if not exists and primary_key is None and "primaryKey" not in given:
        raise TableNotFoundError(f"no table at {uri}, and no primary_key to create it with; give primary_key (and "
                                 "partition_by, buckets), or create it first (maintd table create, Table.create)")
    if primary_key is not None:
        given["primaryKey"] = primary_key if isinstance(primary_key, str) else ",".join(primary_key)
    if partition_by:
        given["partitionBy"] = partition_by if isinstance(partition_by, str) else ",".join(partition_by)
    if buckets is not None:
        given["buckets"] = str(buckets)
    writer = df.write.format(SOURCE_NAME).mode("overwrite" if chosen == "overwrite" else "append").options(**given)
    writer.save(uri)
    return True


def create_temp_view(spark: Any, name: str, uri: str, **options: Any) -> Any:
    """Name the table at ``uri`` in Spark SQL as the temporary view ``name`` (this session), read with the
    data source's read options (``versionAsOf=12``, ``readChangeFeed="true"``...); returns the DataFrame.

    ``spark.sql("SELECT region, count(*) FROM orders GROUP BY region")`` then reads the table, merged, its
    filters pushed into the scan.
    """
    df = spark.read.format(SOURCE_NAME).options(**{k: str(v) for k, v in options.items()}).load(uri)
    df.createOrReplaceTempView(name)
    return df


__all__ = ["create_temp_view", "save"]
