"""PySpark entry points for spark-submit (thin: parse a plan, call maintd.execution)."""
