"""The storage options the data source's Spark tasks carry to the executors (credentials only when asked).

The reader and the writer run their tasks on executors, which open the table themselves. They carry the
table's options that are not credentials, and the driver's credentials too only when the session's conf
says ``spark.maintd.storage.shipOptions=true`` (:data:`maintd.storage.SHIP_CONF`) or its master is local
(its Python workers are children of this process, on this machine, and have no credentials of their own
other than this process's environment).
"""

from __future__ import annotations

from maintd.storage import SHIP_CONF, CarriedStorage, carry_storage


def ships_credentials() -> bool:
    """Whether the active session asks for the driver's storage credentials to travel with the tasks."""
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is None:
        return False
    try:
        if str(session.conf.get(SHIP_CONF, "false")).strip().lower() == "true":
            return True
        return str(session.conf.get("spark.master", "")).strip().startswith("local")
    except Exception:  # a session going away, or Spark Connect without the key: the safe default
        return False


def carried_storage(uri: str) -> CarriedStorage | None:
    """:func:`maintd.storage.carry_storage` with credentials as the active session says."""
    return carry_storage(uri, credentials=ships_credentials())
