"""The contract of the state store, run against SQLite and PostgreSQL alike."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from waiting import wait_until

from maintd.errors import StateStoreError
from maintd.service.records import Decision, RunKind, RunStatus
from maintd.service.store import StateStore, utcnow

from .conftest import StoreTarget

T0 = datetime.fromisoformat("2030-01-01T00:00:00+00:00")


def later(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


# -- schema -------------------------------------------------------------------------------------------


def test_creating_the_schema_twice_keeps_the_data(store_target: StoreTarget) -> None:
    first = store_target.open()
    first.register_table("/wh/a")
    second = store_target.open()
    second.create_schema()
    assert [t.uri for t in second.list_tables()] == ["/wh/a"]
    first.close()
    second.close()


def test_the_store_answers_a_ping_and_reads_an_aware_database_clock(store: StateStore) -> None:
    store.ping()
    now = store.db_now()
    assert now.tzinfo is not None
    assert abs((now - utcnow()).total_seconds()) < 60


# -- tables -------------------------------------------------------------------------------------------


def test_registering_a_table_twice_keeps_the_first_registration(store: StateStore) -> None:
    first = store.register_table("s3://bucket/wh/orders/", now=T0)
    again = store.register_table("s3://bucket/wh/orders/", source="discovered", now=later(5))
    assert again == first
    assert first.name == "orders"
    assert first.source == "explicit"
    assert first.registered_at == T0
    assert first.enabled


def test_registering_many_tables_reports_only_the_new_ones(store: StateStore) -> None:
    assert store.register_tables(["/wh/a", "/wh/b"], source="discovered", now=T0) == 2
    assert store.register_tables(["/wh/b", "/wh/c"], source="discovered", now=T0) == 1
    assert [t.uri for t in store.list_tables()] == ["/wh/a", "/wh/b", "/wh/c"]


def test_disabled_tables_are_listed_but_not_due(store: StateStore) -> None:
    store.register_tables(["/wh/a", "/wh/b"], now=T0)
    store.set_enabled("/wh/a", False)
    assert [t.uri for t in store.list_tables(enabled_only=True)] == ["/wh/b"]
    assert store.due_tables(["/wh/a", "/wh/b", "/wh/new"], now=T0) == ["/wh/b", "/wh/new"]


def test_enabling_an_unregistered_table_is_an_error(store: StateStore) -> None:
    with pytest.raises(StateStoreError, match="not registered"):
        store.set_enabled("/wh/missing", True)


def test_unregistering_a_table_keeps_its_history(store: StateStore) -> None:
    run = store.start_run("/wh/a", RunKind.MAINTENANCE, now=T0)
    store.finish_run(run, RunStatus.SUCCEEDED, now=later(1))
    store.unregister_table("/wh/a")
    assert store.get_table("/wh/a") is None
    assert [r.id for r in store.history("/wh/a")] == [run]


# -- runs ---------------------------------------------------------------------------------------------


def test_a_run_round_trips_its_plan_metrics_and_times(store: StateStore) -> None:
    plan = {"read_version": 7, "tasks": [{"bucket": 3, "files": ["a.parquet", "b.parquet"]}]}
    run = store.start_run("/wh/a", "maintenance", holder="daemon-1", plan=plan, now=T0)
    record = store.finish_run(run, "succeeded", metrics={"bytes_rewritten": 1024, "files": 2}, now=later(2.5))
    assert record.plan == plan
    assert record.metrics == {"bytes_rewritten": 1024, "files": 2}
    assert (record.kind, record.status, record.holder) == ("maintenance", "succeeded", "daemon-1")
    assert record.started_at == T0
    assert record.duration_seconds == 2.5


def test_starting_a_run_registers_its_table(store: StateStore) -> None:
    store.start_run("/wh/adhoc", RunKind.RECLAIM, now=T0)
    table = store.get_table("/wh/adhoc")
    assert table is not None
    assert table.source == "run"


def test_failures_count_up_and_a_success_resets_them(store: StateStore) -> None:
    for attempt in range(2):
        run = store.start_run("/wh/a", RunKind.MAINTENANCE, now=later(attempt))
        store.finish_run(run, RunStatus.FAILED, error="boom", retry_after=later(60), now=later(attempt))
    table = store.get_table("/wh/a")
    assert table is not None
    assert (table.consecutive_failures, table.last_status, table.last_error) == (2, "failed", "boom")
    assert table.retry_after == later(60)
    assert store.due_tables(["/wh/a"], now=later(59)) == []
    assert store.due_tables(["/wh/a"], now=later(61)) == ["/wh/a"]
    run = store.start_run("/wh/a", RunKind.MAINTENANCE, now=later(70))
    store.finish_run(run, RunStatus.SUCCEEDED, now=later(71))
    table = store.get_table("/wh/a")
    assert table is not None
    assert (table.consecutive_failures, table.retry_after, table.last_error) == (0, None, None)
    assert table.last_run_at == later(71)


def test_errors_are_stored_without_passwords(store: StateStore) -> None:
    run = store.start_run("/wh/a", RunKind.MAINTENANCE, now=T0)
    record = store.finish_run(run, RunStatus.FAILED, error="cannot reach postgresql://maintd:hunter2@db/x", now=T0)
    assert record.error == "cannot reach postgresql://maintd:***@db/x"


def test_finishing_an_unknown_run_is_an_error(store: StateStore) -> None:
    with pytest.raises(StateStoreError, match="run 4242 does not exist"):
        store.finish_run(4242, RunStatus.SUCCEEDED)


def test_a_run_cannot_be_finished_as_running(store: StateStore) -> None:
    run = store.start_run("/wh/a", RunKind.MAINTENANCE)
    with pytest.raises(ValueError, match="final status"):
        store.finish_run(run, RunStatus.RUNNING)


def test_history_is_newest_first_filtered_and_paged(store: StateStore) -> None:
    ids = []
    for i, (uri, kind) in enumerate([("/wh/a", "maintenance"), ("/wh/b", "reclaim"), ("/wh/a", "reclaim")]):
        ids.append(store.start_run(uri, kind, now=later(i)))
    store.finish_run(ids[0], RunStatus.FAILED, error="x", now=later(10))
    assert [r.id for r in store.history()] == ids[::-1]
    assert [r.id for r in store.history("/wh/a")] == [ids[2], ids[0]]
    assert [r.id for r in store.history(kind=RunKind.RECLAIM)] == [ids[2], ids[1]]
    assert [r.id for r in store.history(status="failed")] == [ids[0]]
    assert [r.id for r in store.history(limit=1, before_id=ids[2])] == [ids[1]]


def test_last_runs_hold_the_latest_run_of_every_table(store: StateStore) -> None:
    a1 = store.start_run("/wh/a", RunKind.MAINTENANCE, now=T0)
    b1 = store.start_run("/wh/b", RunKind.MAINTENANCE, now=T0)
    a2 = store.start_run("/wh/a", RunKind.RECLAIM, now=later(1))
    assert {uri: r.id for uri, r in store.last_runs().items()} == {"/wh/a": a2, "/wh/b": b1}
    assert {uri: r.id for uri, r in store.last_runs(RunKind.MAINTENANCE).items()} == {"/wh/a": a1, "/wh/b": b1}


def test_decisions_round_trip_in_the_order_recorded(store: StateStore) -> None:
    run = store.start_run("/wh/a", RunKind.MAINTENANCE, now=T0)
    made = [
        Decision("date=2024-01-01", 3, "compact", "small-files", "12 files below 64 MiB"),
        Decision("date=2024-01-01", None, "skip", "cooldown", "compacted 5 min ago"),
    ]
    assert store.record_decisions(run, made) == 2
    assert store.record_decisions(run, []) == 0
    assert [d.decision for d in store.decisions_of(run)] == made


def test_abandoning_runs_touches_only_the_running_runs_of_that_holder(store: StateStore) -> None:
    mine = store.start_run("/wh/a", RunKind.MAINTENANCE, holder="d1", now=T0)
    done = store.start_run("/wh/b", RunKind.MAINTENANCE, holder="d1", now=T0)
    store.finish_run(done, RunStatus.SUCCEEDED, now=T0)
    theirs = store.start_run("/wh/c", RunKind.MAINTENANCE, holder="d2", now=T0)
    assert store.abandon_runs("d1", reason="SIGTERM", now=later(1)) == 1
    statuses = {r.id: (r.status, r.error) for r in store.history()}
    assert statuses[mine] == ("abandoned", "SIGTERM")
    assert statuses[done] == ("succeeded", None)
    assert statuses[theirs] == ("running", None)


def test_pruning_deletes_only_runs_that_ended_before_the_cutoff(store: StateStore) -> None:
    old = store.start_run("/wh/a", RunKind.MAINTENANCE, now=T0)
    store.record_decisions(old, [Decision("p", 0, "compact", "r", "m")])
    store.finish_run(old, RunStatus.SUCCEEDED, now=later(1))
    new = store.start_run("/wh/a", RunKind.MAINTENANCE, now=later(100))
    store.finish_run(new, RunStatus.SUCCEEDED, now=later(101))
    running = store.start_run("/wh/a", RunKind.MAINTENANCE, now=T0)
    assert store.prune_history(later(50)) == 1
    assert sorted(r.id for r in store.history()) == [new, running]
    assert store.decisions_of(old) == []


def test_naive_datetimes_are_refused(store: StateStore) -> None:
    with pytest.raises(StateStoreError, match="naive datetime"):
        store.start_run("/wh/a", RunKind.MAINTENANCE, now=datetime(2030, 1, 1))


# -- leases -------------------------------------------------------------------------------------------

TABLES = ["/wh/a", "/wh/b", "/wh/c"]


def test_a_holder_gets_at_most_limit_leases(store: StateStore) -> None:
    assert store.acquire_leases("d1", TABLES, 30, limit=2, now=T0) == ["/wh/a", "/wh/b"]
    assert store.lease_holders(now=T0) == {"/wh/a": "d1", "/wh/b": "d1"}


def test_a_held_lease_is_not_given_to_another_holder(store: StateStore) -> None:
    store.acquire_leases("d1", TABLES, 30, limit=2, now=T0)
    assert store.acquire_leases("d2", TABLES, 30, limit=3, now=later(29)) == ["/wh/c"]


def test_an_expired_lease_is_taken_over(store: StateStore) -> None:
    store.acquire_leases("d1", TABLES, 30, limit=3, now=T0)
    assert store.acquire_leases("d2", ["/wh/a"], 30, limit=1, now=later(30)) == ["/wh/a"]
    assert store.lease_holders(now=later(30))["/wh/a"] == "d2"
    assert not store.renew_lease("d1", "/wh/a", 30, now=later(31))


def test_acquiring_again_extends_the_leases_already_held_first(store: StateStore) -> None:
    store.acquire_leases("d1", ["/wh/c"], 30, limit=1, now=T0)
    assert store.acquire_leases("d1", TABLES, 30, limit=1, now=later(20)) == ["/wh/c"]
    (lease,) = store.leases(now=later(20))
    assert (lease.acquired_at, lease.expires_at) == (T0, later(50))


def test_renewing_extends_only_unexpired_leases(store: StateStore) -> None:
    store.acquire_leases("d1", ["/wh/a"], 10, limit=1, now=T0)
    store.acquire_leases("d1", ["/wh/b"], 10, limit=1, now=later(5))
    assert store.renew_leases("d1", 10, now=later(12)) == ["/wh/b"]
    assert store.renew_lease("d1", "/wh/b", 10, now=later(20))
    assert not store.renew_lease("d1", "/wh/a", 10, now=later(20))
    assert not store.renew_lease("d2", "/wh/b", 10, now=later(20))


def test_a_released_lease_is_free_at_once(store: StateStore) -> None:
    store.acquire_leases("d1", TABLES, 30, limit=3, now=T0)
    assert store.release_lease("d1", "/wh/a")
    assert not store.release_lease("d2", "/wh/b")
    assert store.acquire_leases("d2", TABLES, 30, limit=3, now=later(1)) == ["/wh/a"]
    assert store.release_all("d1") == 2
    assert store.acquire_leases("d2", TABLES, 30, limit=3, now=later(2)) == TABLES


def test_taking_a_table_over_abandons_the_previous_holders_run(store: StateStore) -> None:
    store.acquire_leases("d1", ["/wh/a"], 10, limit=1, now=T0)
    run = store.start_run("/wh/a", RunKind.MAINTENANCE, holder="d1", now=T0)
    store.acquire_leases("d2", ["/wh/a"], 10, limit=1, now=later(11))
    record = store.get_run(run)
    assert record is not None
    assert record.status == "abandoned"
    assert "taken over by d2" in (record.error or "")


def test_leases_expire_by_the_database_clock(store: StateStore) -> None:
    assert store.acquire_leases("d1", ["/wh/a"], 0.3, limit=1) == ["/wh/a"]
    assert store.acquire_leases("d2", ["/wh/a"], 0.3, limit=1) == []
    wait_until(lambda: store.acquire_leases("d2", ["/wh/a"], 0.3, limit=1) == ["/wh/a"], "d1's lease to expire")


def test_leases_work_for_more_candidates_than_one_statement_holds(store: StateStore) -> None:
    many = [f"/wh/t{i:04d}" for i in range(1_200)]
    assert len(store.acquire_leases("d1", many, 30, limit=1_100, now=T0)) == 1_100
    assert len(store.acquire_leases("d2", many, 30, limit=1_200, now=T0)) == 100


def test_nothing_is_acquired_for_no_candidates_or_a_zero_limit(store: StateStore) -> None:
    assert store.acquire_leases("d1", [], 30, limit=3) == []
    assert store.acquire_leases("d1", TABLES, 30, limit=0) == []


# -- errors -------------------------------------------------------------------------------------------


def test_an_unreachable_database_fails_with_a_redacted_state_store_error() -> None:
    with pytest.raises(StateStoreError) as caught:
        StateStore("postgresql+psycopg://maintd:hunter2@127.0.0.1:1/db", connect_timeout=1)
    assert "hunter2" not in str(caught.value)
    assert "maintd:***@127.0.0.1:1" in str(caught.value)


def test_an_unsupported_url_names_the_supported_ones() -> None:
    from maintd.errors import ConfigError

    with pytest.raises(ConfigError, match="sqlite:///path or postgresql"):  # a setting to fix: exit code 2
        StateStore("mysql://root:pw@localhost/db")


def test_the_store_repr_hides_the_password() -> None:
    store = StateStore("postgresql+psycopg://maintd:hunter2@127.0.0.1:1/db", create=False)
    assert "hunter2" not in repr(store)


def test_backoff_is_per_run_kind(store: StateStore) -> None:
    run = store.start_run("/wh/a", RunKind.MAINTENANCE, now=T0)
    store.finish_run(run, RunStatus.FAILED, error="PolicyError: bad", retry_after=later(60), now=later(1))
    assert store.due_tables(["/wh/a"], RunKind.MAINTENANCE, now=later(2)) == []
    assert store.due_tables(["/wh/a"], RunKind.RECLAIM, now=later(2)) == ["/wh/a"], "reclamation goes on"
    assert store.due_tables(["/wh/a"], now=later(2)) == [], "no kind given: due only if no kind backs off"
    run = store.start_run("/wh/a", RunKind.RECLAIM, now=later(3))
    store.finish_run(run, RunStatus.SUCCEEDED, now=later(4))
    table = store.get_table("/wh/a")
    assert table is not None
    assert (table.failures(RunKind.MAINTENANCE), table.retry_after_of(RunKind.MAINTENANCE)) == (1, later(60)), (
        "a reclamation that succeeds leaves the maintenance backoff alone"
    )
    assert (table.failures(RunKind.RECLAIM), table.consecutive_failures, table.retry_after) == (0, 1, later(60))
    assert store.due_tables(["/wh/a"], RunKind.MAINTENANCE, now=later(5)) == []


# -- checks, replicas and aggregates -------------------------------------------------------------------


def test_checks_are_added_onto_the_table_row_in_place(store: StateStore) -> None:
    from maintd.service.records import CheckRecord

    store.register_tables(["/wh/a", "/wh/b"])
    failed = store.start_run("/wh/b", RunKind.MAINTENANCE, now=T0)
    store.finish_run(failed, RunStatus.FAILED, error="boom", retry_after=later(60), now=later(1))
    layout = {"files": 3, "bytes": 30, "levels": {"L0": {"files": 3, "bytes": 30}}}
    for i in range(2):
        assert store.record_checks("d1", [
            CheckRecord("/wh/a", RunKind.MAINTENANCE, later(10 + i), checks=3, planned=1, found_nothing=True,
                        layout=layout if i else None),
            CheckRecord("/wh/b", RunKind.MAINTENANCE, later(10 + i), checks=1, planned=1, found_nothing=False),
        ]) == 2
    a, b = store.get_table("/wh/a"), store.get_table("/wh/b")
    assert a is not None and b is not None
    assert (a.checks, a.checks_planned, a.checked_by, a.checked_at) == (6, 2, "d1", later(11))
    assert a.maintenance_succeeded_at == later(11) and a.last_status == "skipped" and a.layout == layout
    assert (b.checks, b.checks_planned, b.failures(RunKind.MAINTENANCE), b.last_status) == (2, 2, 1, "failed")
    assert len(store.history()) == 1, "checks add no run"


def test_a_reclamation_that_found_nothing_clears_its_backoff_only(store: StateStore) -> None:
    from maintd.service.records import CheckRecord

    run = store.start_run("/wh/a", RunKind.RECLAIM, now=T0)
    store.finish_run(run, RunStatus.FAILED, error="boom", retry_after=later(60), now=later(1))
    store.record_checks("d1", [CheckRecord("/wh/a", RunKind.RECLAIM, later(5), checks=0, planned=0,
                                           found_nothing=True)])
    a = store.get_table("/wh/a")
    assert a is not None and a.failures(RunKind.RECLAIM) == 0 and a.reclaim_succeeded_at == later(5)
    assert a.checks == 0


def test_the_schedule_reads_the_backoff_of_every_enabled_table(store: StateStore) -> None:
    store.register_tables(["/wh/a", "/wh/b", "/wh/c"])
    store.set_enabled("/wh/c", False)
    run = store.start_run("/wh/b", RunKind.MAINTENANCE)
    store.finish_run(run, RunStatus.FAILED, error="boom", retry_after=later(60))
    now, schedule = store.schedule(RunKind.MAINTENANCE)
    assert schedule == {"/wh/a": None, "/wh/b": later(60)} and now.tzinfo is not None
    assert store.schedule(RunKind.RECLAIM)[1] == {"/wh/a": None, "/wh/b": None}


def test_the_tuned_intervals_are_read_only_for_tables_that_have_one(store: StateStore) -> None:
    store.register_tables(["/wh/a", "/wh/b", "/wh/c"])
    store.set_targets({"/wh/a": {"merge_delay_minutes": 30.0}, "/wh/b": {"merge_delay_minutes": 30.0}})
    assert store.tuned_intervals() == {}, "targets alone tune no interval"
    store.record_tuning("/wh/a", overrides={}, interval_seconds=600.0, reason="slower", predicted={}, measured={})
    store.record_tuning_error("/wh/b", "tuner failed")
    assert store.tuned_intervals() == {"/wh/a": 600.0}


def test_replicas_are_live_while_they_renew_and_gone_when_they_leave(store: StateStore) -> None:
    assert store.heartbeat("r1", 30) == ["r1"]
    assert store.heartbeat("r2", 30) == ["r1", "r2"]
    wait_until(lambda: store.heartbeat("r1", 0.04) == ["r1"], "r2 no longer seen within the last 0.04 s")
    store.leave("r1")
    assert store.heartbeat("r2", 30) == ["r2"]


def test_tables_and_leases_are_counted_by_the_database(store: StateStore) -> None:
    store.register_tables(["/wh/a", "/wh/b", "/wh/c", "/wh/d"])
    store.set_enabled("/wh/d", False)
    run = store.start_run("/wh/b", RunKind.MAINTENANCE)
    store.finish_run(run, RunStatus.FAILED, error="boom", retry_after=later(60))
    store.acquire_leases("d1", ["/wh/a", "/wh/b"], 60, 10)
    store.acquire_leases("d2", ["/wh/c"], 60, 10)
    assert store.table_counts() == {"healthy": 2, "failing": 1, "disabled": 1}
    assert store.lease_counts() == {"d1": 2, "d2": 1}


def test_the_unhealthiest_tables_come_first(store: StateStore) -> None:
    from maintd.service.records import CheckRecord

    store.register_tables([f"/wh/t{i}" for i in range(5)])
    for i, failures in ((3, 2), (1, 1)):
        for _ in range(failures):
            run = store.start_run(f"/wh/t{i}", RunKind.MAINTENANCE)
            store.finish_run(run, RunStatus.FAILED, error="boom", retry_after=later(60))
    store.record_checks("d1", [CheckRecord("/wh/t0", RunKind.MAINTENANCE, later(5), 1, 0, True),
                               CheckRecord("/wh/t4", RunKind.MAINTENANCE, later(1), 1, 0, True)])
    assert [t.uri for t in store.unhealthiest_tables(4)] == ["/wh/t3", "/wh/t1", "/wh/t2", "/wh/t4"]
