"""Keeping a local session's Python workers alive between runs (maintd.service.warm_workers)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest
from loguru import logger

from maintd.errors import ConfigError
from maintd.service.spark_driver import _warm_workers
from maintd.service.warm_workers import DEFAULT_LOCAL_INTERVAL, WarmWorkers, keep_warm_interval, session_busy
from maintd.settings import Settings, load_settings


@pytest.mark.parametrize(("setting", "master", "expected"), [
    (None, "local[*]", DEFAULT_LOCAL_INTERVAL),
    (None, "local[2,4]", DEFAULT_LOCAL_INTERVAL),
    (None, "spark://10.0.0.5:7077", 0.0),  # a cluster: the pings would keep its executors from being released
    (None, "k8s://https://kubernetes.default.svc", 0.0),
    (None, None, 0.0),  # Spark Connect: no workers of ours
    (20.0, "spark://10.0.0.5:7077", 20.0),  # asked for explicitly
    (0.0, "local[*]", 0.0),
])
def test_the_interval_defaults_to_pings_for_a_local_master_only(setting: float | None, master: str | None,
                                                                 expected: float) -> None:
    assert keep_warm_interval(setting, master) == expected


def _wait_for(cond: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return False


def test_pings_run_at_the_interval_until_stopped() -> None:
    warm = WarmWorkers(0.02, lambda: None)
    warm.start()
    assert _wait_for(lambda: warm.pings >= 3)
    warm.stop()
    after = warm.pings
    time.sleep(0.1)
    assert warm.pings == after and not any(t.name == "maintd-warm-workers" for t in threading.enumerate())


def test_no_ping_while_skip_says_so_and_none_at_all_when_off() -> None:
    busy = threading.Event()
    busy.set()
    calls: list[float] = []
    warm = WarmWorkers(0.02, lambda: calls.append(time.monotonic()), skip=busy.is_set)
    warm.start()
    time.sleep(0.15)
    assert calls == []
    busy.clear()
    assert _wait_for(lambda: len(calls) >= 2)
    warm.stop()
    off = WarmWorkers(0.0, lambda: calls.append(0.0))
    off.start()
    assert off._thread is None


def test_a_failing_ping_is_logged_once_in_a_row_and_the_next_ones_still_run() -> None:
    outcomes = iter([RuntimeError("py4j gone"), RuntimeError("py4j gone"), None, RuntimeError("again")])
    seen: list[str] = []

    def ping() -> None:
        exc = next(outcomes, None)
        if exc is not None:
            raise exc

    sink = logger.add(lambda m: seen.append(m.record["message"]), level="WARNING")
    try:
        warm = WarmWorkers(0.02, ping)
        warm.start()
        assert _wait_for(lambda: warm.pings >= 2)
        warm.stop()
    finally:
        logger.remove(sink)
    failures = [m for m in seen if "keeping the Spark workers warm failed" in m]
    assert len(failures) == 2 and "RuntimeError: py4j gone" in failures[0]  # once per run of failures


def test_an_interval_of_a_minute_or_more_is_refused_since_spark_closes_the_workers_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAINTD_SPARK__KEEP_WORKERS_WARM_SECONDS", "90")
    with pytest.raises(ConfigError, match="keep_workers_warm_seconds"):
        load_settings()


@pytest.mark.spark
def test_the_daemon_keeps_a_local_session_s_workers_and_pings_reuse_them(spark: Any) -> None:
    """With the shared local session: the keeper starts at the default interval, a ping is an empty job that
    runs on the workers the session already has (the same processes before and after), and no ping runs
    while the driver is reported gone."""
    warm = _warm_workers(spark, Settings(), lost=lambda: None)
    assert warm is not None and warm.interval == DEFAULT_LOCAL_INTERVAL
    warm.stop()
    assert _warm_workers(spark, Settings(spark={"keep_workers_warm_seconds": 0}), lost=lambda: None) is None

    def pid(_: Any) -> list[int]:
        import time as t

        t.sleep(0.2)  # both tasks at once: one worker each
        return [os.getpid()]

    before = set(spark.sparkContext.parallelize([0, 1], 2).flatMap(pid).collect())
    assert not session_busy(spark)
    warm.ping()
    after = set(spark.sparkContext.parallelize([0, 1], 2).flatMap(pid).collect())
    assert before == after and len(before) == 2
    gone = _warm_workers(spark, Settings(spark={"keep_workers_warm_seconds": 0.05}), lost=lambda: "the JVM exited")
    assert gone is not None
    time.sleep(0.3)
    gone.stop()
    assert gone.pings == 0


def test_a_keeper_that_cannot_start_leaves_the_driver_started(monkeypatch: pytest.MonkeyPatch) -> None:
    """The session works without the keeper: a failure to start it is a warning, not a failed daemon start."""
    import maintd.service.spark_driver as spark_driver

    class Session:
        pass

    def broken(*_: Any) -> None:
        raise RuntimeError("no sparkContext")

    monkeypatch.setattr(spark_driver, "start_session", lambda _settings: Session())
    monkeypatch.setattr(spark_driver, "_quiet_accumulator_server", lambda _spark: None)
    monkeypatch.setattr(spark_driver, "_warm_workers", broken)
    seen: list[str] = []
    sink = logger.add(lambda m: seen.append(m.record["message"]), level="WARNING")
    try:
        driver = spark_driver.SparkDriver()
        assert driver.start(Settings(), threading.Event()) is True
    finally:
        logger.remove(sink)
    assert isinstance(driver.session, Session) and driver.warm is None
    assert any("cannot keep the Spark workers warm between runs: RuntimeError: no sparkContext" in m for m in seen)
