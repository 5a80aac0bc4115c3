"""``maintd.spark.register(spark)``: make ``spark.read/write/writeStream.format("maintd")`` work in a session.

A short public name for :func:`maintd.engines.spark.register`.
"""

from maintd.engines.spark import SOURCE_NAME, MaintdDataSource, register

__all__ = ["SOURCE_NAME", "MaintdDataSource", "register"]
