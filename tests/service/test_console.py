"""The web console over HTTP: the daemon's endpoint serving real tables' runs from a real state store."""

from __future__ import annotations

import base64
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from maintd.service.console import Console
from maintd.service.daemon import WorkView
from maintd.service.http import HealthServer
from maintd.service.metrics import Metrics
from maintd.service.store import StateStore
from maintd.settings import HttpSettings

from .console_fleet import CANARY, HOSTILE_NAME, HOSTILE_PROPERTY, HOSTILE_REASON, Fleet, make_fleet, settings_for

TOKEN = "console-token-0123456789"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tmp_path = tmp_path_factory.mktemp("console")
    settings = settings_for(tmp_path)
    store = StateStore(settings.store.url)
    yield make_fleet(tmp_path, store, settings)
    store.close()


def work() -> WorkView:
    return WorkView(running=[("file:///wh/orders", "maintenance", 12.5, None)],
                    queued=[("reclaim", "file:///wh/<queued>")], backing_off=[])


@pytest.fixture(scope="module")
def server(fleet: Fleet) -> Iterator[HealthServer]:
    console = Console(fleet.store, fleet.settings, holder="replica-a", work=work)
    with HealthServer(Metrics(), host="127.0.0.1", port=0, console=console) as running:
        yield running


def get(server: HealthServer, path: str, headers: dict[str, str] | None = None) -> tuple[int, str, dict[str, str]]:
    request = urllib.request.Request(server.url + path, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), dict(exc.headers)


def rows_of(body: str) -> list[str]:
    return re.findall(r"<tr>(.*?)</tr>", body.split("<tbody>", 1)[1].split("</tbody>", 1)[0])


def test_the_fleet_page_shows_every_table_unhealthy_first_with_its_layout_lease_and_last_run(
    server: HealthServer, fleet: Fleet
) -> None:
    status, body, headers = get(server, "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "script-src" not in headers["Content-Security-Policy"] and "default-src 'none'" in (
        headers["Content-Security-Policy"])
    rows = rows_of(body)
    assert len(rows) == 3 and "broken" in rows[0] and "class=bad>3<" in rows[0]  # the most failures in a row first
    assert "weird" in rows[1] and "class=bad>1<" in rows[1] and ">orders<" in rows[2]
    orders = next(r for r in rows if ">orders<" in r)
    assert "replica-a" in orders and "succeeded" in orders and "base " in orders
    assert "<script>" not in body
    assert "can be searched" in body and "NoSuchBucket: gone-bucket" in body  # the roots, the failing one too


def test_the_fleet_page_filters_orders_and_pages_by_query_parameters(server: HealthServer) -> None:
    _, body, _ = get(server, "/?state=healthy")
    assert len(rows_of(body)) == 1 and ">orders<" in rows_of(body)[0]
    _, body, _ = get(server, "/?state=failing")
    assert len(rows_of(body)) == 2
    _, body, _ = get(server, "/?q=ORD")
    assert len(rows_of(body)) == 1 and ">orders<" in rows_of(body)[0]
    _, body, _ = get(server, "/?sort=name&per=1&page=2")
    assert len(rows_of(body)) == 1 and "page 2 of 3" in body and "previous" in body and "next" in body
    _, body, _ = get(server, "/?sort=failures&desc=1")
    assert "broken" in rows_of(body)[-1]
    _, body, _ = get(server, "/?sort=files")  # the most files first: weird's 16 level-0 files, then orders' 2
    assert "L0 16" in rows_of(body)[0] and ">orders<" in rows_of(body)[1]
    assert "broken" in rows_of(body)[2]  # no layout recorded: last
    _, body, _ = get(server, "/?sort=l0_age")  # the oldest level-0 file first
    assert "L0 16" in rows_of(body)[0]
    _, body, _ = get(server, "/?q=nothing-matches")
    assert "no table matches" in body


@pytest.mark.parametrize(("query", "named"), [("state=sick", "state="), ("sort=size", "sort="), ("per=0", "per="),
                                             ("page=x", "page="), ("per=100000", "per=")])
def test_a_bad_fleet_parameter_is_answered_400_naming_it(server: HealthServer, query: str, named: str) -> None:
    status, body, _ = get(server, "/?" + query)
    assert status == 400 and named in body


def test_the_table_page_shows_runs_over_time_runs_plan_explained_properties_pins_policy_and_buckets(
    server: HealthServer, fleet: Fleet
) -> None:
    status, body, _ = get(server, "/table?uri=" + quote(fleet.healthy, safe=""))
    assert status == 200
    assert body.count("<svg") == 3 and "<circle" in body  # duration, files and bytes over time
    assert f'href="/run?id={fleet.run_id}"' in body and "succeeded" in body
    assert "explained bucket by bucket" in body and "compact" in body
    assert "Files by bucket" in body and "files a reader opens" in body
    assert "max_delta_files" in body  # the resolved policy
    assert re.search(r"history retained \d+ h", body)
    _, hostile, _ = get(server, "/table?uri=" + quote(fleet.hostile, safe=""))
    assert "a reader&#x27;s job" in hostile  # the pin, escaped like everything else


def test_the_table_page_shows_targets_gaps_the_last_retune_and_plans_with_the_tuned_knobs(
    server: HealthServer, fleet: Fleet
) -> None:
    _, body, _ = get(server, "/table?uri=" + quote(fleet.healthy, safe=""))
    targets = body.split("<h2>Targets", 1)[1].split("<h2>Last re-tune</h2>", 1)[0]
    rows = rows_of(targets)
    assert len(rows) == 2
    assert "read_files_per_bucket" in rows[0] and ">4.00<" in rows[0] and ">6.00<" in rows[0]
    assert "class=bad>+50% missed" in rows[0]
    assert "merge_delay_minutes" in rows[1] and "class=ok>-60% met" in rows[1]
    retune = body.split("<h2>Last re-tune</h2>", 1)[1].split("</table>", 1)[0]
    assert "&lt;em&gt;every&lt;/em&gt;" in retune and HOSTILE_REASON not in body  # the reason, escaped
    assert "max_delta_files&quot;: 9" in retune and "10 min" in retune  # applied knobs, tuned check interval
    policy = body.split("<h2>Policy</h2>", 1)[1].split("<h2>Targets", 1)[0]
    assert "tuned by the daemon: <code>compaction.max_delta_files</code>" in policy
    assert '&quot;max_delta_files&quot;: 9' in policy  # resolved as maintd plan does: tuned over the file's 6
    _, plain, _ = get(server, "/table?uri=" + quote(fleet.failing, safe=""))
    assert "declares no target" in plain and "tuned by the daemon" not in plain


def test_the_fleet_page_shows_the_targets_each_table_misses(server: HealthServer) -> None:
    _, body, _ = get(server, "/")
    assert "targets missed" in body
    orders = next(r for r in rows_of(body) if ">orders<" in r)
    assert orders.endswith("<td><span class=bad>read_files_per_bucket</span></td>")
    assert all(r.endswith("<td></td>") for r in rows_of(body) if ">orders<" not in r)  # no targets: empty


def test_the_run_page_shows_its_tasks_measures_and_decisions(server: HealthServer, fleet: Fleet) -> None:
    status, body, _ = get(server, f"/run?id={fleet.run_id}")
    assert status == 200
    assert "bytes_written" in body and "tasks_committed" in body and "spark_app_id" in body
    assert "input files" in body and "compact" in body
    tasks = body.split("<h2>Tasks</h2>", 1)[1].split("</table>", 1)[0]
    assert len(rows_of(tasks)) == 2  # one compaction per bucket
    assert all(re.search(r"<td class=n>[1-9]\d*</td><td class=n>[\d.]+ KiB</td>", row) for row in rows_of(tasks))


def test_unknown_tables_and_runs_are_404_and_missing_parameters_400(server: HealthServer) -> None:
    assert get(server, "/run?id=999999")[0] == 404
    assert get(server, "/table?uri=file%3A%2F%2F%2Fnowhere")[0] == 404
    assert get(server, "/table")[0] == 400
    assert get(server, "/run?id=abc")[0] == 400


def test_markup_in_names_properties_errors_and_the_queue_is_shown_as_text(server: HealthServer, fleet: Fleet) -> None:
    pages = [get(server, path)[1] for path in (
        "/", "/table?uri=" + quote(fleet.hostile, safe=""), "/table?uri=" + quote(fleet.failing, safe=""),
        "/daemon")]
    joined = "".join(pages)
    for raw in (HOSTILE_NAME, HOSTILE_PROPERTY, "<b>bold</b>", "<queued>"):
        assert raw not in joined
    assert "&lt;script&gt;alert(&#x27;name&#x27;)&lt;/script&gt;" in pages[0]
    assert "&lt;img src=x onerror=alert(&#x27;prop&#x27;)&gt;" in pages[1]
    assert "&lt;b&gt;bold&lt;/b&gt;" in pages[2]
    assert "<script" not in joined.lower() and "onerror=" not in joined.replace("&lt;img src=x onerror=", "")


def test_the_daemon_page_shows_replicas_leases_queue_and_settings_without_any_secret(
    tmp_path: Path, fleet: Fleet
) -> None:
    settings = settings_for(tmp_path, console_token=TOKEN + "-daemon")
    settings.store.url = "postgresql+psycopg://maintd:pg-canary-secret-99@db:5432/maintd"
    console = Console(fleet.store, settings, holder="replica-a", work=work)
    with HealthServer(Metrics(), host="127.0.0.1", port=0, console=console) as running:
        status, body, _ = get(running, "/daemon", {"Authorization": f"Bearer {TOKEN}-daemon"})
    assert status == 200
    assert "replica-a (this one)" in body and "Queued (1)" in body and "Running (1)" in body
    assert "warehouse.prefix_storage_options.s3://canary/.aws_secret_access_key" in body
    assert "http.console_token" in body and "store.url" in body
    for secret in (CANARY, TOKEN, "pg-canary-secret-99"):
        assert secret not in body


def test_without_a_console_the_endpoint_answers_404_at_the_root() -> None:
    with HealthServer(Metrics(), host="127.0.0.1", port=0) as running:
        assert get(running, "/")[0] == 404


def test_the_console_is_served_by_default_only_on_a_loopback_address() -> None:
    assert HttpSettings(host="127.0.0.1").console_served() and HttpSettings(host="::1").console_served()
    assert HttpSettings(host="localhost").console_served()
    assert not HttpSettings(host="0.0.0.0").console_served() and not HttpSettings(host="10.1.2.3").console_served()
    assert HttpSettings(host="0.0.0.0", console_token=TOKEN).console_served()
    assert HttpSettings(host="0.0.0.0", console_password="long-enough-pw").console_served()
    assert HttpSettings(host="0.0.0.0", console="on").console_served()
    assert not HttpSettings(host="127.0.0.1", console="off").console_served()


def test_short_console_credentials_are_refused_with_the_setting_named() -> None:
    with pytest.raises(ValueError, match="console_token must be at least 16"):
        HttpSettings(console_token="short")
    with pytest.raises(ValueError, match="console_password must be at least 12"):
        HttpSettings(console_password="short")


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_with_credentials_every_page_needs_them_and_metrics_and_probes_do_not(tmp_path: Path, fleet: Fleet) -> None:
    settings = settings_for(tmp_path, host="0.0.0.0", console_token=TOKEN, console_password="basic-password-1")
    console = Console(fleet.store, settings)
    with HealthServer(Metrics(), host="127.0.0.1", port=0, console=console) as running:
        for path in ("/", "/daemon", f"/run?id={fleet.run_id}", "/table?uri=" + quote(fleet.healthy, safe="")):
            status, body, headers = get(running, path)
            assert status == 401 and headers["WWW-Authenticate"].startswith("Basic") and "orders" not in body
        for wrong in ({"Authorization": "Bearer nope"}, {"Authorization": f"Bearer {TOKEN}x"},
                      basic("maintd", "wrong-password"), basic("other", "basic-password-1"),
                      {"Authorization": "Basic !!!"}):
            assert get(running, "/", wrong)[0] == 401
        for right in ({"Authorization": f"Bearer {TOKEN}"}, basic("anyone", TOKEN),
                      basic("maintd", "basic-password-1")):
            assert get(running, "/", right)[0] == 200
        assert get(running, "/metrics")[0] == 200 and get(running, "/healthz")[0] == 200


def test_the_console_changes_nothing_every_other_method_is_refused(server: HealthServer) -> None:
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        request = urllib.request.Request(server.url + "/", method=method, data=b"x")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        assert refused.value.code == 405


def test_an_unreachable_store_is_answered_503_naming_it_and_the_probes_still_answer() -> None:
    store = StateStore("postgresql+psycopg://maintd:pw-canary-42@127.0.0.1:9/none", connect_timeout=1, create=False)
    with HealthServer(Metrics(), host="127.0.0.1", port=0, console=Console(store)) as running:
        for path in ("/", "/daemon", "/run?id=1"):
            status, body, _ = get(running, path)
            assert status == 503 and "state store" in body and "pw-canary-42" not in body
        assert get(running, "/healthz")[0] == 200
    store.close()
