"""Plans run in process on local worker processes (maintd.execution.processes): real processes, real tables."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from maintd.errors import ConfigError
from maintd.execution import ExecutionOptions, execute, run_plan
from maintd.execution.driver import local_backend
from maintd.execution.processes import ProcessBackend, WorkerDiedError, _Worker, stop_workers, worker_pool
from maintd.execution.scheduler import LocalBackend
from maintd.execution.spark import options_from_settings
from maintd.storage.faulty import FaultPlan

from .helpers import make_table, plan_all, sorted_read


def _files_on_disk(table) -> set[str]:  # type: ignore[no-untyped-def]
    return {f.path for f in table.storage.walk() if f.path.startswith("bucket-")}


def test_units_run_in_worker_processes_and_write_what_threads_write(tmp_path: Path) -> None:
    a, model = make_table(tmp_path / "a", commits=16, buckets=4, seed=3)
    b, _ = make_table(tmp_path / "b", commits=16, buckets=4, seed=3)
    procs = ExecutionOptions(in_process_threads=2)
    assert isinstance(local_backend(a.uri, procs), ProcessBackend)
    assert isinstance(local_backend(b.uri, procs.model_copy(update={"in_process_workers": "threads"})), LocalBackend)
    for kind in ("cluster", "compact"):
        ra = run_plan(plan_all(a, kind), a, None, procs, commit=True)
        rb = run_plan(plan_all(b, kind), b, None, procs.model_copy(update={"in_process_workers": "threads"}),
                      commit=True)
        assert ra.engine == rb.engine == "in-process"
        assert all(r.ok for r in ra.results) and ra.outcome is not None and len(ra.outcome.committed) == 4
        assert [sorted(x.rows for x in r.adds) for r in ra.results] == [sorted(x.rows for x in r.adds)
                                                                        for r in rb.results]
        assert sorted_read(a).equals(sorted_read(b))
    assert sorted_read(a).equals(model.table())
    pool = worker_pool(2)
    pids = {w.proc.pid for w in pool._idle}
    assert len(pids) == 2 and os.getpid() not in pids and all(w.alive() for w in pool._idle)


def test_a_worker_killed_mid_pack_is_replaced_and_its_pack_runs_again(tmp_path: Path) -> None:
    table, model = make_table(tmp_path, commits=12, buckets=4)
    markers = tmp_path / "markers"
    pool = worker_pool(2)
    pool.warm()
    before = {w.proc.pid for w in pool._idle}
    report = run_plan(plan_all(table, "compact"), table, None,
                      ExecutionOptions(in_process_threads=2, faults={"*": f"kill_once:{markers}"}), commit=True)
    assert (markers / "killed").exists(), "no worker was killed"
    assert [r.ok for r in report.results] == [True] * 4 and report.retried >= 1
    assert report.outcome is not None and len(report.outcome.committed) == 4
    snap = table.snapshot()
    assert _files_on_disk(table) == set(snap.files) | set(snap.tombstones), "the killed attempt's output was left"
    assert sorted_read(table).equals(model.table())
    after = {w.proc.pid for w in worker_pool(2)._idle}
    assert len(before) == 2 and before - after, "the dead worker is still in the pool"
    assert after and all(w.alive() for w in worker_pool(2)._idle)


def test_a_pack_whose_workers_die_twice_fails_its_units_and_leaves_no_files(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    table, _ = make_table(tmp_path, commits=6, buckets=2)
    snap = table.snapshot()
    calls: list[int] = []

    def die(self: _Worker, request: dict[str, object]) -> list[str]:
        calls.append(self.proc.pid)
        self.proc.kill()
        self.proc.wait()
        raise WorkerDiedError(f"local worker process {self.proc.pid} ended while it ran the pack (killed by signal 9)")

    monkeypatch.setattr(_Worker, "call", die)
    results = execute(plan_all(table, "compact"), table, None, ExecutionOptions(in_process_threads=2))
    assert [r.ok for r in results] == [False, False]
    assert all("ended while it ran the pack" in (r.error or "") for r in results)
    assert len(calls) == 4 and len(set(calls)) == 4, "each pack: one try and one retry, each on a new worker"
    assert table.snapshot().version == snap.version
    assert _files_on_disk(table) == set(snap.files)


def test_a_storage_registered_in_this_process_only_runs_in_threads(tmp_path: Path) -> None:
    table, model = make_table(tmp_path, commits=8, buckets=2)
    faults = FaultPlan()
    faults.install("file")
    try:
        assert isinstance(local_backend(table.uri, ExecutionOptions()), LocalBackend)
        report = run_plan(plan_all(table, "compact"), table, None, ExecutionOptions(), commit=True)
    finally:
        faults.uninstall()
    assert all(r.ok for r in report.results) and sorted_read(table).equals(model.table())
    assert isinstance(local_backend(table.uri, ExecutionOptions()), ProcessBackend)


def test_an_interpreter_that_does_not_know_its_executable_runs_units_in_threads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table, _ = make_table(tmp_path, commits=2, buckets=1)
    monkeypatch.setattr(sys, "executable", "")
    assert isinstance(local_backend(table.uri, ExecutionOptions()), LocalBackend)


def test_a_cancelled_run_starts_no_further_pack(tmp_path: Path) -> None:
    table, _ = make_table(tmp_path, commits=4, buckets=2)
    backend = ProcessBackend(1, table.uri)
    backend.cancel()
    from maintd.execution.units import task_specs

    specs = task_specs(plan_all(table, "compact"), table.snapshot(), ExecutionOptions(), storage=table.storage)
    with pytest.raises(RuntimeError, match="abandoned"):
        backend.run([specs[:1]])


def test_a_script_without_a_main_guard_runs_once(tmp_path: Path) -> None:
    """Workers are not forked or spawned by multiprocessing, so the caller's script is never run again."""
    table, model = make_table(tmp_path, commits=6, buckets=2)
    expected = model.table().num_rows
    script = tmp_path / "maintain.py"
    script.write_text(textwrap.dedent(f"""
        from maintd import Table
        from maintd.execution import ExecutionOptions, PlanDoc, run_plan
        print("script body ran", flush=True)
        t = Table.open({table.uri!r})
        plan = PlanDoc.model_validate_json({plan_all(table, "compact").model_dump_json()!r})
        report = run_plan(plan, t, None, ExecutionOptions(in_process_threads=2), commit=True)
        assert report.engine == "in-process" and all(r.ok for r in report.results), report.results
        print("rows", t.read().num_rows, flush=True)
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("script body ran") == 1 and f"rows {expected}" in out.stdout


def test_a_worker_answers_on_stdout_only_and_exits_when_its_stdin_closes() -> None:
    w = _Worker()
    try:
        assert w.call({"pack": [], "threads": 1, "uri": None, "options": None}) == []
        assert w.call({"pack": ["not a spec"], "threads": 1, "uri": None, "options": None})[0].startswith("{")
    finally:
        w.stop()
    assert w.proc.returncode == 0


def test_stopped_workers_exit() -> None:
    pool = worker_pool(2)
    pool.warm()
    procs = [w.proc for w in pool._idle]
    assert len(procs) == 2 and all(p.poll() is None for p in procs)
    stop_workers()
    assert all(p.poll() == 0 for p in procs)


def test_the_workers_setting() -> None:
    conf = type("S", (), {"conf": {"spark.maintd.inProcess.workers": "Threads"}})()
    assert options_from_settings(conf).in_process_workers == "threads"
    assert ExecutionOptions().in_process_workers == "processes"
    bad = type("S", (), {"conf": {"spark.maintd.inProcess.workers": "forks"}})()
    with pytest.raises(ConfigError, match=r"spark\.maintd\.inProcess\.workers.*'forks'.*processes.*threads"):
        options_from_settings(bad)


@pytest.mark.parametrize(("conf", "started"), [({}, 2), ({"spark.maintd.inProcess.workers": "threads"}, 0),
                                               ({"spark.maintd.inProcess.maxInputBytes": "0"}, 0)],
                         ids=["processes", "threads", "never-in-process"])
def test_the_daemon_starts_its_workers_with_itself_only_when_they_will_run_units(conf: dict[str, str],
                                                                              started: int) -> None:
    from maintd.service.runtime import _warm_local_workers
    from maintd.settings import Settings

    stop_workers()
    _warm_local_workers(Settings(spark={"conf": {"spark.maintd.inProcess.threads": "2", **conf}}))
    from maintd.execution import processes

    pool = processes._POOL
    assert (len(pool._idle) if pool is not None else 0) == started
    assert all(w.ready and w.alive() for w in (pool._idle if pool is not None else []))


def test_a_node_of_many_cpus_keeps_at_most_four_workers_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    from maintd.execution import driver

    monkeypatch.setattr(driver, "usable_cpus", lambda: 64)
    assert driver.in_process_threads(ExecutionOptions()) == driver.DEFAULT_MAX_WORKERS == 4
    assert driver.in_process_threads(ExecutionOptions(in_process_workers="threads")) == 64
    assert driver.in_process_threads(ExecutionOptions(in_process_threads=16)) == 16
    monkeypatch.setattr(driver, "usable_cpus", lambda: 2)
    assert driver.in_process_threads(ExecutionOptions()) == 2


@pytest.mark.parametrize(("script", "message"), [
    ("import sys; sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.readline(); "
     "sys.stdout.write('[\"{\"task'); sys.stdout.flush(); sys.exit(3)", "ended while it ran the pack (exit code 3)"),
    ("import sys; sys.exit(5)", "ended while starting (exit code 5)"),
    ("import os, signal, sys; sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.readline(); "
     "os.kill(os.getpid(), signal.SIGKILL)", "ended while it ran the pack (killed by signal 9)"),
], ids=["answer-cut-short", "died-starting", "killed"])
def test_a_worker_that_ends_without_a_whole_answer_is_reported_dead(script: str, message: str) -> None:
    w = _Worker([sys.executable, "-c", script])
    try:
        with pytest.raises(WorkerDiedError, match=re.escape(message)):
            w.call({"pack": [], "threads": 1, "attempt": 0, "uri": None, "options": None})
    finally:
        w.stop(kill=True)
    assert not w.alive()
