"""Where work runs and what executors are given, without starting Spark: the rule for running a plan in process,
the configuration of the sessions maintd builds, the storage options tasks carry, and the opt-in worker daemon."""

from __future__ import annotations

import pickle
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from loguru import logger
from pyspark import cloudpickle

from maintd.execution import malloc
from maintd.execution import spark as spark_module
from maintd.execution.scheduler import SparkBackend
from maintd.execution.spark import (
    DAEMON_MODULE,
    DAEMON_MODULE_CONF,
    OWNER_CONF,
    PYSPARK_PYTHON_CONF,
    SHIP_STORAGE_CONF,
    WORKER_PRELOAD_CONF,
    options_from_settings,
    runs_small_plans_in_process,
    session_conf,
)
from maintd.execution.specs import ExecutionOptions
from maintd.settings import SparkSettings
from maintd.storage import clear_storage_options, configure_storage
from maintd.storage.options import carry_storage

SECRET = "driver-secret-4f1c0e9a"
OPTIONS = {"aws_endpoint": "http://127.0.0.1:9", "aws_access_key_id": "DRIVERKEYID", "aws_secret_access_key": SECRET,
           "aws_session_token": "driver-token-77", "aws_region": "eu-west-1", "aws_allow_http": "true"}


class FakeContext:
    def __init__(self, master: str, conf: dict[str, str]) -> None:
        self.master, self._conf = master, conf
        self.defaultParallelism = 2

    def getConf(self) -> Any:
        return SimpleNamespace(get=lambda k, d=None: self._conf.get(k, d))


class FakeSession:
    """A classic session as far as the rule reads one: its master and its configuration."""

    def __init__(self, master: str, **conf: str) -> None:
        self.sparkContext = FakeContext(master, conf)
        self.conf = SimpleNamespace(get=lambda k, d=None: conf.get(k, d))


@pytest.fixture
def registered() -> Iterator[str]:
    root = "s3://bucket/wh"
    configure_storage(root, OPTIONS)
    yield f"{root}/t"
    clear_storage_options()


@pytest.fixture
def warnings_logged() -> Iterator[list[str]]:
    got: list[str] = []
    sink = logger.add(lambda m: got.append(str(m)), level="WARNING", format="{message}")
    yield got
    logger.remove(sink)


# -- the rule ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("session", "expected"), [
    (FakeSession("local[2,4]", **{OWNER_CONF: "maintd"}), True),
    (FakeSession("local[*]", **{OWNER_CONF: "maintd"}), True),
    (FakeSession("spark://127.0.0.1:7077", **{OWNER_CONF: "maintd"}), False),  # maintd's, on a cluster
    (FakeSession("local[2]"), False),  # the caller's own local session (a notebook's)
    (FakeSession("yarn"), False),
    (FakeSession("k8s://https://api:6443"), False),
])
def test_only_a_session_maintd_built_with_a_local_master_runs_small_plans_in_process(session: Any,
                                                                                      expected: bool) -> None:
    assert runs_small_plans_in_process(session, SparkSettings()) is expected


def test_a_spark_connect_session_never_runs_plans_in_process() -> None:
    connect = type("SparkSession", (), {"__module__": "pyspark.sql.connect.session"})()
    assert not runs_small_plans_in_process(connect, SparkSettings())


@pytest.mark.parametrize(("settings", "expected"), [
    (SparkSettings(), True), (SparkSettings(master="local[2]"), True),
    (SparkSettings(master="spark://10.0.0.1:7077"), False), (SparkSettings(master="yarn"), False),
    (SparkSettings(remote="sc://host:15002"), False),
    (SparkSettings(conf={"spark.master": "spark://10.0.0.1:7077"}), False),
])
def test_before_any_session_the_settings_foresee_the_session_maintd_would_build(
        settings: SparkSettings, expected: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.setattr(spark_module, "_running_session", lambda: None)
    assert runs_small_plans_in_process(None, settings) is expected


def test_under_spark_submit_every_plan_runs_on_the_submitted_session(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "40001")
    monkeypatch.setattr(spark_module, "_running_session", lambda: None)
    assert not runs_small_plans_in_process(None, SparkSettings(master="local[*]"))


# -- the sessions maintd builds ----------------------------------------------------------------------------------


def test_a_cluster_master_is_given_no_interpreter_path_of_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/driver-only/venv/bin/python")
    for master in ("spark://10.0.0.1:7077", "yarn", "k8s://https://api:6443"):
        conf = session_conf(SparkSettings(master=master))
        assert PYSPARK_PYTHON_CONF not in conf, master
        assert conf["spark.master"] == master and conf[OWNER_CONF] == "maintd"
    given = session_conf(SparkSettings(master="yarn", conf={PYSPARK_PYTHON_CONF: "/usr/bin/python3.11"}))
    assert given[PYSPARK_PYTHON_CONF] == "/usr/bin/python3.11", "a path the user gives for the executors stands"


def test_a_local_masters_workers_preload_the_machines_jemalloc_and_a_cluster_masters_do_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    monkeypatch.setattr(malloc, "system_jemalloc", lambda: "libjemalloc.so.2")
    assert session_conf(SparkSettings(master="local[2]"))[WORKER_PRELOAD_CONF] == "libjemalloc.so.2"
    for master in ("spark://10.0.0.1:7077", "yarn", "k8s://https://api:6443"):
        assert WORKER_PRELOAD_CONF not in session_conf(SparkSettings(master=master)), master
    own = session_conf(SparkSettings(master="local[2]", conf={WORKER_PRELOAD_CONF: ""}))
    assert own[WORKER_PRELOAD_CONF] == "", "a preload the conf names (none, here) stands"
    monkeypatch.setenv("LD_PRELOAD", "")  # the daemon's own environment names one: its workers inherit that
    assert WORKER_PRELOAD_CONF not in session_conf(SparkSettings(master="local[2]"))
    monkeypatch.delenv("LD_PRELOAD")
    monkeypatch.setattr(malloc, "system_jemalloc", lambda: None)  # a machine without jemalloc
    assert WORKER_PRELOAD_CONF not in session_conf(SparkSettings(master="local[2]"))


def test_a_local_master_runs_its_workers_with_this_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.setattr(spark_module, "usable_cpus", lambda: 3)
    conf = session_conf(SparkSettings(master="local[*]"))
    assert conf[PYSPARK_PYTHON_CONF] == sys.executable
    assert conf["spark.master"] == "local[3,4]", "local[*] follows the CPU quota, with task retries"


def test_the_worker_daemon_is_off_by_default_and_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    assert DAEMON_MODULE_CONF not in session_conf(SparkSettings())
    assert session_conf(SparkSettings(worker_daemon=True))[DAEMON_MODULE_CONF] == DAEMON_MODULE
    stock = {DAEMON_MODULE_CONF: "pyspark.daemon"}
    assert session_conf(SparkSettings(worker_daemon=True, conf=stock))[DAEMON_MODULE_CONF] == "pyspark.daemon"
    shipped = session_conf(SparkSettings(worker_daemon=True, conf={"spark.submit.pyFiles": "maintd.zip"}))
    assert DAEMON_MODULE_CONF not in shipped


def test_the_worker_daemon_falls_back_to_pysparks_own_when_pyspark_differs(
        monkeypatch: pytest.MonkeyPatch, warnings_logged: list[str]) -> None:
    import pyspark.daemon

    def worker(sock: Any, authenticated: bool, reuse: bool) -> int:  # a future signature
        return 0

    monkeypatch.setattr(pyspark.daemon, "worker", worker)
    conf = session_conf(SparkSettings(worker_daemon=True))
    assert DAEMON_MODULE_CONF not in conf, "PySpark's own daemon runs"
    assert any("PySpark's own worker daemon runs instead" in w and "pyspark.daemon.worker takes" in w
               for w in warnings_logged), warnings_logged


def test_the_daemon_module_checks_what_it_relies_on() -> None:
    import pyspark.daemon

    from maintd.pyspark_daemon import incompatibility

    assert incompatibility() is None, "the locked pyspark is the one the module was written for"

    def opens_otherwise(sock: Any, authenticated: bool) -> int:
        return sock.makefile("rb")  # type: ignore[no-any-return]

    def manager_with_args(port: int) -> None: ...

    assert "no longer opens its input" in (incompatibility(SimpleNamespace(
        worker=opens_otherwise, manager=pyspark.daemon.manager)) or "")
    assert "needs arguments" in (incompatibility(SimpleNamespace(
        worker=pyspark.daemon.worker, manager=manager_with_args)) or "")
    assert "no worker() or manager()" in (incompatibility(SimpleNamespace(manager=pyspark.daemon.manager)) or "")


def test_run_as_the_daemon_on_a_different_pyspark_it_runs_pysparks_daemon_unchanged(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import pyspark.daemon

    import maintd.pyspark_daemon as module

    ran: list[Any] = []
    monkeypatch.setattr(pyspark.daemon, "manager", lambda: ran.append(pyspark.daemon.worker))
    stock = pyspark.daemon.worker
    monkeypatch.setattr(module, "incompatibility", lambda: "pyspark 9.9's pyspark.daemon.worker takes ('x',)")
    module.main()
    assert ran == [stock], "the stock worker stays in PySpark's loop"
    assert "running PySpark's own daemon" in capsys.readouterr().err
    monkeypatch.setattr(module, "incompatibility", lambda: None)
    monkeypatch.setattr(module, "preload", lambda: False)
    module.main()
    assert ran[-1] is module.worker


# -- storage options carried to executors ------------------------------------------------------------------------


def test_tasks_carry_no_credentials_by_default(registered: str) -> None:
    carried = carry_storage(registered)
    assert carried is not None
    assert dict(carried.options) == {"aws_endpoint": "http://127.0.0.1:9", "aws_region": "eu-west-1",
                                     "aws_allow_http": "true"}
    shipped = carry_storage(registered, credentials=True)
    assert shipped is not None and shipped.options["aws_secret_access_key"] == SECRET
    assert SECRET not in repr(shipped) and "DRIVERKEYID" in repr(shipped)


def test_credentials_from_the_driver_environment_stay_on_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ENVKEYID")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    carried = carry_storage("s3://bucket/t")
    assert carried is not None and dict(carried.options) == {"aws_endpoint": "http://127.0.0.1:9"}


@pytest.mark.parametrize(("master", "conf", "settings_opt_in", "ships"), [
    ("spark://127.0.0.1:7077", {}, False, False),
    ("yarn", {}, False, False),
    ("spark://127.0.0.1:7077", {SHIP_STORAGE_CONF: "true"}, False, True),
    ("yarn", {}, True, True),
    ("local[2,4]", {}, False, True),  # the workers are this process's children
])
def test_a_spark_task_closure_holds_the_drivers_secret_only_when_asked(
        registered: str, master: str, conf: dict[str, str], settings_opt_in: bool, ships: bool) -> None:
    options = ExecutionOptions(ship_storage_options=settings_opt_in)
    backend = SparkBackend(FakeSession(master, **conf), options, "test", table_uri=registered)
    closure = cloudpickle.dumps(backend.fn)
    assert (SECRET.encode() in closure) is ships
    assert (b"DRIVERKEYID" in closure) is ships
    carried = pickle.loads(closure).keywords["storage"]
    assert carried.options["aws_endpoint"] == "http://127.0.0.1:9", "what is not a credential still travels"
    assert SECRET not in repr(backend.fn) and SECRET not in str(carried)


def test_the_settings_opt_in_reaches_the_execution_options_and_the_session() -> None:
    assert not options_from_settings(SparkSettings()).ship_storage_options
    assert options_from_settings(SparkSettings(ship_storage_options=True)).ship_storage_options
    assert options_from_settings(SparkSettings(conf={SHIP_STORAGE_CONF: "true"})).ship_storage_options
    assert session_conf(SparkSettings(ship_storage_options=True))[SHIP_STORAGE_CONF] == "true"
    assert SHIP_STORAGE_CONF not in session_conf(SparkSettings())


# -- documents at URIs -------------------------------------------------------------------------------------------


def test_documents_are_read_and_written_at_paths_and_file_uris(tmp_path: Path) -> None:
    from maintd.errors import InvalidInputError
    from maintd.storage.documents import read_document, write_document

    write_document(str(tmp_path / "new" / "dir" / "a.json"), b"{}")
    assert (tmp_path / "new" / "dir" / "a.json").read_bytes() == b"{}"
    write_document(f"file://{tmp_path}/b.json", b"[1]")
    assert read_document(str(tmp_path / "b.json")) == b"[1]"
    with pytest.raises(FileNotFoundError, match="no document at"):
        read_document(f"{tmp_path}/missing.json")
    with pytest.raises(InvalidInputError, match="is a directory"):
        write_document(f"{tmp_path}/", b"x")
    with pytest.raises(InvalidInputError, match="names no document"):
        write_document("s3://bucket", b"x")


def test_documents_are_read_and_written_on_s3(s3_root: str) -> None:
    from maintd.storage.documents import read_document, write_document

    write_document(f"{s3_root}/runs/2026/summary.json", b'{"ok": true}')
    assert read_document(f"{s3_root}/runs/2026/summary.json") == b'{"ok": true}'
    with pytest.raises(FileNotFoundError):
        read_document(f"{s3_root}/runs/none.json")


@pytest.mark.parametrize(("session", "ships"), [
    (None, False),
    (FakeSession("spark://127.0.0.1:7077", **{"spark.master": "spark://127.0.0.1:7077"}), False),
    (FakeSession("yarn", **{"spark.master": "yarn", SHIP_STORAGE_CONF: "true"}), True),
    (FakeSession("local[2,4]", **{"spark.master": "local[2,4]"}), True),
])
def test_the_data_sources_tasks_carry_credentials_as_the_active_session_says(
        registered: str, session: Any, ships: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark.sql import SparkSession

    from maintd.engines.spark.carry import carried_storage

    monkeypatch.setattr(SparkSession, "getActiveSession", staticmethod(lambda: session))
    carried = carried_storage(registered)
    assert carried is not None and ("aws_secret_access_key" in carried.options) is ships
    assert carried.options["aws_region"] == "eu-west-1"
