"""The Spark driver's JVM logs like maintd: JSON lines in JSON mode, WARN and above by default."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from maintd.service.jvm_logging import JAVA_OPTIONS_CONF, with_jvm_logging
from maintd.settings import Settings

SCRIPT = """
from maintd.service.logging import configure_logging
from maintd.service.spark_driver import start_session
from maintd.settings import Settings

settings = Settings.model_validate({"logging": {"json": True}, "spark": {"master": "local[1]",
                                    "driver_memory": "512m"}})
configure_logging(settings.logging, own_stderr=True)
spark = start_session(settings)
log = spark.sparkContext._jvm.org.apache.logging.log4j.LogManager.getLogger("maintd.test")
log.info("an info line of the JVM")
log.warn("a warning of the JVM")
spark.stop()
"""


@pytest.mark.slow
def test_in_json_mode_the_driver_jvm_writes_json_lines_at_warn_and_above(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAINTD_")}
    env["PYSPARK_PYTHON"] = sys.executable
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, cwd=tmp_path,
                            timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(line)["record"] for line in result.stderr.splitlines() if line.strip()]
    jvm = [r for r in records if r["extra"].get("source") == "jvm"]
    assert [r["message"] for r in jvm if r["name"] == "maintd.test"] == ["a warning of the JVM"]
    assert {r["level"]["name"] for r in jvm} <= {"WARNING", "ERROR", "CRITICAL"}, "WARN by default"
    assert not any("Running Spark version" in r["message"] for r in records), "Spark's INFO lines are not written"


def test_the_driver_options_keep_the_users_own_and_leave_their_log4j_configuration_alone() -> None:
    mine = Settings.model_validate({"spark": {"conf": {JAVA_OPTIONS_CONF: "-XX:+UseG1GC"}},
                                    "logging": {"spark_level": "error"}})
    options = with_jvm_logging(mine).spark.conf[JAVA_OPTIONS_CONF]
    assert options.startswith("-XX:+UseG1GC -Dlog4j2.configurationFile=file:")
    assert "-Dmaintd.log4j2.level=ERROR" in options
    assert mine.spark.conf[JAVA_OPTIONS_CONF] == "-XX:+UseG1GC", "the settings given are not changed"
    own = Settings.model_validate({"spark": {"conf": {JAVA_OPTIONS_CONF: "-Dlog4j2.configurationFile=/etc/l.xml"}}})
    assert with_jvm_logging(own) is own
    remote = Settings.model_validate({"spark": {"remote": "sc://spark:15002"}})
    assert JAVA_OPTIONS_CONF not in with_jvm_logging(remote).spark.conf
