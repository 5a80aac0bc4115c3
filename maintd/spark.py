"""``maintd.spark.register(spark)``: make ``spark.read/write/writeStream.format("maintd")`` work in a session;
``maintd.spark.save(df, uri, mode)`` for Spark's save modes, ``maintd.spark.create_temp_view(spark, name, uri)``
to name a table in SQL.

Short public names for :mod:`maintd.engines.spark`.
"""

from maintd.engines.spark import SOURCE_NAME, MaintdDataSource, create_temp_view, register, save

__all__ = ["SOURCE_NAME", "MaintdDataSource", "create_temp_view", "register", "save"]
