"""The daemon's SparkSession on demand (maintd.service.spark_driver): started by the first run that needs it, held
while a run uses it, stopped once idle, and readiness without one. A stand-in session (no JVM); the real one is
tested in test_daemon_lifecycle.py."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from maintd.errors import ConfigError, SparkDriverLostError
from maintd.service import spark_driver
from maintd.service.spark_driver import SparkDriver
from maintd.settings import Settings


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fake_session() -> Any:
    process = SimpleNamespace(poll=lambda: None, pid=4242)
    return SimpleNamespace(sparkContext=SimpleNamespace(_gateway=SimpleNamespace(proc=process),
                                                        _jsc=SimpleNamespace(sc=lambda: SimpleNamespace(
                                                            isStopped=lambda: False))))


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """Sessions started and stopped through the driver."""
    log: dict[str, list[Any]] = {"started": [], "stopped": []}

    def start(settings: Settings) -> Any:
        session = fake_session()
        log["started"].append(session)
        return session

    monkeypatch.setattr(spark_driver, "start_session", start)
    monkeypatch.setattr(spark_driver, "stop_jvm", lambda s: log["stopped"].append(s))
    return log


def test_no_session_until_a_run_needs_one_and_ready_meanwhile(started: dict[str, list[Any]]) -> None:
    driver = SparkDriver(Settings())
    assert driver.session is None and driver.ready() and driver.alive() and driver.lost() is None
    with driver.session_for_run() as spark:
        assert spark is started["started"][0] and driver.session is spark
    with driver.session_for_run() as again:
        assert again is spark, "one session for every run while it lives"
    assert len(started["started"]) == 1 and driver.ready()


def test_an_idle_session_is_stopped_after_the_setting_and_the_next_run_starts_a_new_one(
        started: dict[str, list[Any]]) -> None:
    clock = Clock()
    driver = SparkDriver(Settings(spark={"idle_stop_seconds": 60}), clock=clock)
    with driver.session_for_run() as first:
        clock.now += 3600
        assert not driver.stop_if_idle(), "never under a run that holds it"
    clock.now += 59
    assert not driver.stop_if_idle()
    clock.now += 1
    assert driver.stop_if_idle() and driver.session is None and started["stopped"] == [first]
    assert driver.ready() and not driver.stop_if_idle()
    with driver.session_for_run() as second:
        assert second is not first
    assert driver.starts == 2


def test_zero_never_stops_it_and_a_session_not_launched_here_is_never_stopped(
        started: dict[str, list[Any]]) -> None:
    clock = Clock()
    never = SparkDriver(Settings(spark={"idle_stop_seconds": 0}), clock=clock)
    never.watch_idleness()
    assert never._watcher is None
    driver = SparkDriver(Settings(spark={"idle_stop_seconds": 1}), clock=clock)
    with driver.session_for_run() as spark:
        spark.sparkContext._gateway.proc = None  # spark-submit launched this process and its JVM
    clock.now += 10
    assert not driver.stop_if_idle() and driver.session is spark


def test_a_failed_start_fails_the_run_and_readiness_until_a_start_succeeds(monkeypatch: pytest.MonkeyPatch) -> None:
    attempts: list[int] = []

    def start(settings: Settings) -> Any:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConfigError("cannot start Spark at local[*]: no java; check spark.master/spark.remote")
        return fake_session()

    monkeypatch.setattr(spark_driver, "start_session", start)
    driver = SparkDriver(Settings())
    with pytest.raises(ConfigError, match="no java"), driver.session_for_run():
        pass
    with pytest.raises(ConfigError, match=r"no java; check spark\.master"):
        driver.ready()
    with driver.session_for_run() as spark:
        assert spark is not None
    assert driver.ready() and len(attempts) == 2


def test_a_stop_while_the_session_starts_fails_the_run_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()

    def start(settings: Settings) -> Any:
        release.wait(30)
        return fake_session()

    monkeypatch.setattr(spark_driver, "start_session", start)
    monkeypatch.setattr(spark_driver, "stop_jvm", lambda s: None)
    stop = threading.Event()
    driver = SparkDriver(Settings(), stop)
    threading.Timer(0.3, stop.set).start()
    with pytest.raises(SparkDriverLostError, match="stopped while the SparkSession started"), \
            driver.session_for_run():
        pass
    release.set()
    assert driver.session is None


def test_a_dead_driver_fails_liveness_and_no_run_gets_the_session(started: dict[str, list[Any]]) -> None:
    driver = SparkDriver(Settings())
    with driver.session_for_run() as spark:
        pass
    spark.sparkContext._gateway.proc.poll = lambda: -9
    with pytest.raises(SparkDriverLostError, match=r"pid 4242.*code -9"):
        driver.alive()
    with pytest.raises(SparkDriverLostError), driver.session_for_run():
        pass
    assert not driver.stop_if_idle(), "a dead driver is not stopped again"
