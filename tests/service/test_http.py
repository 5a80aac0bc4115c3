"""The read-only HTTP endpoint and the metrics it serves."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from prometheus_client.parser import text_string_to_metric_families
from waiting import wait_until

from maintd.errors import SparkDriverLostError, StateStoreError
from maintd.service.aggregates import GaugeReads
from maintd.service.http import HealthServer
from maintd.service.metrics import Metrics
from maintd.service.records import TableRecord
from maintd.service.store_metrics import StoreGauges, table_state


class Flag:
    def __init__(self) -> None:
        self.ready = True

    def __call__(self) -> bool:
        return self.ready


@pytest.fixture(scope="module")
def shared_flag() -> Flag:
    return Flag()


@pytest.fixture
def flag(shared_flag: Flag) -> Iterator[Flag]:
    shared_flag.ready = True
    yield shared_flag
    shared_flag.ready = True


@pytest.fixture(scope="module")
def server(shared_flag: Flag) -> Iterator[HealthServer]:
    """One server for the module: stopping a server waits for its poll interval."""
    flag = shared_flag

    def store_check() -> None:
        if not flag.ready:
            raise StateStoreError("state store postgresql://maintd:hunter2@db/x: cannot ping")

    with HealthServer(Metrics(), {"store": store_check, "spark": flag}, host="127.0.0.1", port=0) as running:
        yield running


def request(server: HealthServer, path: str, method: str = "GET") -> tuple[int, bytes, dict[str, str]]:
    req = urllib.request.Request(server.url + path, method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as response:
            return response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read(), dict(error.headers)


def test_healthz_answers_ok(server: HealthServer) -> None:
    assert request(server, "/healthz")[:2] == (200, b"ok\n")


def test_readyz_is_ok_when_every_check_passes(server: HealthServer) -> None:
    status, body, _ = request(server, "/readyz")
    assert status == 200
    assert json.loads(body) == {"ready": True, "failing": {}}


def test_readyz_names_the_failing_checks_without_secrets(server: HealthServer, flag: Flag) -> None:
    flag.ready = False
    status, body, _ = request(server, "/readyz")
    assert status == 503
    failing = json.loads(body)["failing"]
    assert failing["spark"] == "not ready"
    assert failing["store"].startswith("StateStoreError: state store postgresql://maintd:***@db/x")
    assert b"hunter2" not in body


def test_metrics_show_each_probe_check_up_or_down_at_every_scrape(server: HealthServer, flag: Flag) -> None:
    def checks() -> dict[tuple[str, str], float]:
        families = {f.name: f for f in text_string_to_metric_families(request(server, "/metrics")[1].decode())}
        return {(s.labels["probe"], s.labels["check"]): s.value for s in families["maintd_probe_check_ok"].samples}

    assert checks() == {("readiness", "spark"): 1, ("readiness", "store"): 1}
    flag.ready = False  # Spark not ready, and the store failing
    assert checks() == {("readiness", "spark"): 0, ("readiness", "store"): 0}


def test_metrics_are_served_in_prometheus_text_format(server: HealthServer) -> None:
    server.metrics.observe_run("maintenance", "failed", 1.5, error="TaskExecutionError")
    server.metrics.commit_conflicts.labels(type="ConcurrentDeleteReadError").inc()
    status, body, headers = request(server, "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=")
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    runs = {tuple(s.labels.values()): s.value for s in families["maintd_runs"].samples if s.name.endswith("_total")}
    assert runs == {("maintenance", "failed"): 1.0}
    assert "maintd_commit_conflicts" in families
    assert "maintd_run_duration_seconds" in families


def test_an_unknown_path_is_not_found(server: HealthServer) -> None:
    assert request(server, "/admin")[0] == 404


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_methods_that_could_change_state_are_not_allowed(server: HealthServer, method: str) -> None:
    status, _, headers = request(server, "/metrics", method)
    assert status == 405
    assert headers["Allow"] == "GET, HEAD"


def test_head_answers_without_a_body(server: HealthServer) -> None:
    status, body, headers = request(server, "/healthz", "HEAD")
    assert (status, body, headers["Content-Length"]) == (200, b"", "3")


def test_each_metrics_object_has_its_own_registry() -> None:
    first, second = Metrics(), Metrics()
    first.runs.labels(kind="reclaim", status="succeeded").inc()
    assert b'maintd_runs_total{kind="reclaim",status="succeeded"} 1.0' in first.expose()
    assert b"maintd_runs_total{" not in second.expose()


def test_forgetting_a_table_drops_its_series_only() -> None:
    metrics = Metrics()
    for table in ("/wh/a", "/wh/b"):
        metrics.bytes_rewritten.labels(table=table).inc(5)
        metrics.files_reclaimed.labels(table=table, reason="data").inc(2)
    metrics.forget_table("/wh/a")
    text = metrics.expose().decode()
    assert 'table="/wh/a"' not in text
    assert 'maintd_bytes_rewritten_total{table="/wh/b"} 5.0' in text
    assert 'maintd_files_reclaimed_total{reason="data",table="/wh/b"} 2.0' in text


class FakeSource:
    """The store's reads for the gauges, over lists held in memory."""

    def __init__(self, tables: list[TableRecord], holders: dict[str, str], fail: bool = False) -> None:
        self.tables, self.holders, self.fail = tables, holders, fail

    def gauge_reads(self, max_tables: int | None, unhealthiest: int) -> GaugeReads:
        if self.fail:
            raise StateStoreError("state store postgresql://maintd:hunter2@db/x: cannot count tables")
        counts: dict[str, int] = {}
        for t in self.tables:
            counts[table_state(t)] = counts.get(table_state(t), 0) + 1
        leases: dict[str, int] = {}
        for holder in self.holders.values():
            leases[holder] = leases.get(holder, 0) + 1
        return GaugeReads(counts, leases, [], [t for t in self.tables if t.enabled])


def test_store_gauges_count_leases_per_holder_and_tables_per_state_at_every_scrape() -> None:
    holders = {"/wh/a": "d1", "/wh/b": "d1", "/wh/c": "d2"}
    tables = [record("/wh/a", failures=2), record("/wh/b"), record("/wh/c", enabled=False)]
    metrics = Metrics()
    metrics.registry.register(StoreGauges(FakeSource(tables, holders)))
    text = metrics.expose().decode()
    assert 'maintd_leases_held{holder="d1"} 2.0' in text and 'maintd_leases_held{holder="d2"} 1.0' in text
    assert 'maintd_tables{state="failing"} 1.0' in text and 'maintd_tables{state="disabled"} 1.0' in text
    assert "maintd_store_up 1.0" in text
    del holders["/wh/c"]
    assert 'holder="d2"' not in metrics.expose().decode(), "read again at the next scrape"


def test_store_gauges_are_absent_rather_than_stale_while_the_store_fails() -> None:
    metrics = Metrics()
    metrics.registry.register(StoreGauges(FakeSource([], {}, fail=True)))
    text = metrics.expose().decode()
    assert "maintd_store_up 0.0" in text and "maintd_tables{" not in text and "hunter2" not in text


def record(uri: str, *, failures: int = 0, enabled: bool = True) -> TableRecord:
    return TableRecord(uri=uri, name=uri, source="explicit", registered_at=datetime(2026, 1, 1, tzinfo=UTC),
                       enabled=enabled, last_status=None, last_run_at=None, last_error=None,
                       maintenance_failures=failures, maintenance_retry_after=None, reclaim_failures=0,
                       reclaim_retry_after=None)


def test_a_client_that_sends_no_request_is_disconnected_after_the_timeout() -> None:
    import socket

    with (
        HealthServer(Metrics(), host="127.0.0.1", port=0, request_timeout=0.5) as server,
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as stuck,
    ):
        stuck.sendall(b"GET /metrics HTTP/1.1\r\n")  # and nothing more
        started = time.monotonic()
        assert stuck.recv(1024) == b"", "the server closed the connection"
        assert time.monotonic() - started < 60
        assert request(server, "/healthz")[:2] == (200, b"ok\n"), "others are served meanwhile"


def test_connections_beyond_the_bound_get_503_at_once() -> None:
    import socket

    with HealthServer(Metrics(), host="127.0.0.1", port=0, request_timeout=5, max_connections=2) as server:
        held = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(2)]
        try:
            for conn in held:
                conn.sendall(b"GET ")  # a request that never completes holds its slot

            def refused() -> bool:  # served until the server has taken both connections, then refused
                status = request(server, "/healthz")[0]
                assert status in (200, 503), status
                return status == 503

            wait_until(refused, "the third connection to get 503")
        finally:
            for conn in held:
                conn.close()
        wait_until(lambda: request(server, "/healthz")[0] == 200, "the slots to be given back")


def test_liveness_checks_fail_healthz_naming_the_cause() -> None:
    def driver() -> bool:
        raise SparkDriverLostError("the Spark driver JVM (pid 42) exited with code -9")

    with HealthServer(Metrics(), {}, host="127.0.0.1", port=0, liveness={"spark_driver": driver}) as server:
        status, body, _ = request(server, "/healthz")
    assert status == 503
    assert json.loads(body) == {"alive": False, "failing": {
        "spark_driver": "SparkDriverLostError: the Spark driver JVM (pid 42) exited with code -9"}}
