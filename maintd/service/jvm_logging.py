"""The log output of the Spark driver's JVM, in the format of maintd's own logs.

The JVM writes to the process's stderr with log4j2. Left alone it prints Spark's INFO lines in its own
text format between maintd's JSON lines, which a log collector cannot parse. maintd ships two log4j2
configurations beside this module and passes one to the driver JVM when the session is built, through
``spark.driver.extraJavaOptions`` (the only moment JVM options can be given).

- ``log4j2/json.properties`` with ``log4j2/event.json``, log4j2's JSON template layout shaped like loguru's
  JSON lines (``{"text": ..., "record": {"time", "level": {"name"}, "message", "name", ...}}``, levels named
  as loguru names them, ``record.extra.source == "jvm"``), when ``logging.json`` is true;
- ``log4j2/text.properties``, maintd's text line format, otherwise.

Both write at ``logging.spark_level`` (``WARN`` by default) and above. A configuration the user gives
(``-Dlog4j2.configurationFile`` in ``spark.driver.extraJavaOptions``) is left alone, and so is a driver
that already runs (under ``spark-submit`` the deployment owns the JVM's logging). The JSON layout comes
with Spark 4's jars; with an older Spark the text configuration is used and a warning says why.
"""

from __future__ import annotations

import os
from pathlib import Path

from loguru import logger

from maintd.settings import LoggingSettings, Settings

CONFIG_DIR = Path(__file__).with_name("log4j2")
JAVA_OPTIONS_CONF = "spark.driver.extraJavaOptions"
#: The jar of log4j2's JSON template layout (shipped with Spark 4).
_TEMPLATE_JAR = "log4j-layout-template-json-"


def java_options(logging: LoggingSettings) -> list[str]:
    """The JVM options that make the driver log like maintd (see the module docstring)."""
    json_lines = logging.json_lines and _json_layout_available()
    config = CONFIG_DIR / ("json.properties" if json_lines else "text.properties")
    options = [f"-Dlog4j2.configurationFile={config.as_uri()}", f"-Dmaintd.log4j2.level={logging.spark_level}"]
    if json_lines:
        options.append(f"-Dmaintd.log4j2.template={(CONFIG_DIR / 'event.json').as_uri()}")
    return options


def with_jvm_logging(settings: Settings) -> Settings:
    """``settings`` with the driver's log configuration added to ``spark.conf`` (a copy; ``settings`` is kept).

    Options already in ``spark.driver.extraJavaOptions`` stay first; a log4j2 configuration of the user's own
    wins, and so does Spark Connect (``spark.remote``), whose server logs on its own.
    """
    spark = settings.spark
    given = spark.conf.get(JAVA_OPTIONS_CONF, "")
    if spark.remote or "log4j2.configurationFile" in given or "log4j.configurationFile" in given:
        return settings
    added = " ".join(_quoted(option) for option in java_options(settings.logging))
    conf = {**spark.conf, JAVA_OPTIONS_CONF: f"{given} {added}".strip()}
    return settings.model_copy(update={"spark": spark.model_copy(update={"conf": conf})})


def _quoted(option: str) -> str:
    return f'"{option}"' if " " in option else option


def _json_layout_available() -> bool:
    home = spark_home()
    if home is None or any((home / "jars").glob(f"{_TEMPLATE_JAR}*.jar")):
        return True  # no local Spark to look into: let log4j2 say what is missing
    logger.warning(
        "Spark at {} has no log4j2 JSON template layout ({}*.jar, shipped with Spark 4): the Spark driver logs "
        "text lines",
        home,
        _TEMPLATE_JAR,
    )
    return False


def spark_home() -> Path | None:
    """``$SPARK_HOME``, else the directory of the installed pyspark package (None without pyspark)."""
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    try:
        from pyspark.find_spark_home import _find_spark_home
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return None
    return Path(_find_spark_home())


__all__ = ["CONFIG_DIR", "java_options", "spark_home", "with_jvm_logging"]
