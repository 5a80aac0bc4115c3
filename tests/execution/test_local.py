"""Plans run in process in warm processes of the fork server (maintd.execution.local): real processes, real
tables, real signals (SIGKILL, SIGSTOP)."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from loguru import logger
from waiting import wait_until

from maintd.errors import ConfigError
from maintd.execution import ExecutionOptions, execute, local, run_plan
from maintd.execution.driver import local_backend
from maintd.execution.local import (
    TIMEOUT_BASE_SECONDS,
    ProcessBackend,
    UnitLostError,
    end_lanes,
    lane_pids,
    pack_timeout,
)
from maintd.execution.scheduler import LocalBackend
from maintd.execution.spark import options_from_settings
from maintd.execution.units import task_specs
from maintd.storage.faulty import FaultPlan

from .helpers import make_table, plan_all, sorted_read


def _files_on_disk(table) -> set[str]:  # type: ignore[no-untyped-def]
    return {f.path for f in table.storage.walk() if f.path.startswith("bucket-")}


@pytest.fixture
def log_lines() -> list[str]:
    lines: list[str] = []
    handler = logger.add(lambda m: lines.append(str(m)), level="WARNING", format="{level} {message}")
    yield lines
    logger.remove(handler)


def test_units_run_in_child_processes_and_write_what_threads_write(tmp_path: Path) -> None:
    a, model = make_table(tmp_path / "a", commits=16, buckets=4, seed=3)
    b, _ = make_table(tmp_path / "b", commits=16, buckets=4, seed=3)
    procs = ExecutionOptions(in_process_threads=2)
    threads = procs.model_copy(update={"in_process_workers": "threads"})
    assert isinstance(local_backend(a.uri, procs), ProcessBackend)
    assert isinstance(local_backend(b.uri, threads), LocalBackend)
    for kind in ("cluster", "compact"):
        ra = run_plan(plan_all(a, kind), a, None, procs, commit=True)
        rb = run_plan(plan_all(b, kind), b, None, threads, commit=True)
        assert ra.engine == rb.engine == "in-process"
        assert all(r.ok for r in ra.results) and ra.outcome is not None and len(ra.outcome.committed) == 4
        assert [sorted(x.rows for x in r.adds) for r in ra.results] == [sorted(x.rows for x in r.adds)
                                                                        for r in rb.results]
        assert sorted_read(a).equals(sorted_read(b))
    assert sorted_read(a).equals(model.table())


def test_a_runs_processes_serve_the_next_run_warm_and_end_once_idle(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    end_lanes()
    monkeypatch.setattr(local, "IDLE_SECONDS", 2.0)
    table, model = make_table(tmp_path, commits=8, buckets=4)
    options = ExecutionOptions(in_process_threads=2)
    assert all(r.ok for r in run_plan(plan_all(table, "cluster"), table, None, options, commit=True).results)
    first = set(lane_pids())
    assert len(first) == 2, "a run of two packs at once starts two processes"
    assert all(r.ok for r in run_plan(plan_all(table, "compact"), table, None, options, commit=True).results)
    assert set(lane_pids()) == first, "the next run did not reuse the warm processes"
    assert sorted_read(table).equals(model.table())
    wait_until(lambda: not lane_pids() and not any(Path(f"/proc/{p}").exists() for p in first),
               "the idle processes to end", timeout=30)


def test_the_processes_of_a_killed_caller_end_with_its_fork_server(tmp_path: Path) -> None:
    """A daemon killed with SIGKILL runs no shutdown: its idle processes see their fork server end, and end."""
    table, _ = make_table(tmp_path, commits=6, buckets=2)
    script = _caller_script(tmp_path, table, """
        print("lanes", *lane_pids(), flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        pids = [int(p) for p in line.split()[1:]]
        assert line.startswith("lanes") and len(pids) == 2, line
        assert all(Path(f"/proc/{p}").exists() for p in pids)
    finally:
        proc.kill()
        proc.wait(30)
    wait_until(lambda: not any(_running(p) for p in pids), "the orphaned processes to end", timeout=30)


def _caller_script(tmp_path: Path, table, then: str) -> Path:  # type: ignore[no-untyped-def]
    """A script that compacts ``table`` in process, as a daemon's run would, then runs ``then`` (its lanes idle)."""
    script = tmp_path / "caller.py"
    script.write_text(textwrap.dedent(f"""
        import time
        from pathlib import Path
        from maintd import Table
        from maintd.execution import ExecutionOptions, PlanDoc, run_plan
        from maintd.execution.local import lane_pids
        if __name__ == "__main__":
            t = Table.open({table.uri!r})
            plan = PlanDoc.model_validate_json({plan_all(table, "compact").model_dump_json()!r})
            report = run_plan(plan, t, None, ExecutionOptions(in_process_threads=2), commit=True)
            assert all(r.ok for r in report.results), report.results
    """) + textwrap.indent(textwrap.dedent(then), " " * 4))
    return script


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_process_killed_mid_pack_is_replaced_and_its_pack_runs_again(tmp_path: Path, log_lines: list[str]) -> None:
    table, model = make_table(tmp_path, commits=12, buckets=4)
    markers = tmp_path / "markers"
    backend = ProcessBackend(2, table.uri)
    report = run_plan(plan_all(table, "compact"), table, None,
                      ExecutionOptions(in_process_threads=2, faults={"*": f"kill_once:{markers}"}), commit=True,
                      backend=backend)
    assert (markers / "killed").exists(), "no process was killed"
    assert [r.ok for r in report.results] == [True] * 4 and report.retried >= 1
    assert report.outcome is not None and len(report.outcome.committed) == 4
    snap = table.snapshot()
    assert _files_on_disk(table) == set(snap.files) | set(snap.tombstones), "the killed attempt's output was left"
    assert sorted_read(table).equals(model.table())
    assert any("killed by signal 9" in line and "runs again in a new process" in line for line in log_lines)


def test_a_process_stopped_with_sigstop_is_killed_at_its_timeout_and_its_pack_runs_again(
        tmp_path: Path, log_lines: list[str]) -> None:
    table, model = make_table(tmp_path, commits=12, buckets=2)
    markers = tmp_path / "markers"
    options = ExecutionOptions(in_process_threads=2, unit_timeout_seconds=3, faults={"*": f"stop_once:{markers}"})
    started = time.monotonic()
    report = run_plan(plan_all(table, "compact"), table, None, options, commit=True)
    pid = int((markers / "stopped").read_text())
    assert not Path(f"/proc/{pid}").exists(), "the stopped process was not killed"
    assert [r.ok for r in report.results] == [True] * 2 and report.retried == 1
    assert 3 <= time.monotonic() - started < 60
    snap = table.snapshot()
    assert _files_on_disk(table) == set(snap.files) | set(snap.tombstones), "the stopped attempt's output was left"
    assert sorted_read(table).equals(model.table())
    assert any(f"local process {pid} did not finish its pack within 3 s" in line and "killed" in line
               and "runs again" in line for line in log_lines), log_lines


@pytest.mark.slow
def test_a_pack_stopped_in_both_attempts_fails_its_units_and_leaves_no_files(
        tmp_path: Path, log_lines: list[str]) -> None:
    table, _ = make_table(tmp_path, commits=6, buckets=2)
    snap = table.snapshot()
    markers = tmp_path / "markers"
    options = ExecutionOptions(in_process_threads=2, unit_timeout_seconds=2, faults={"*": f"stop:{markers}"})
    report = run_plan(plan_all(table, "compact"), table, None, options, commit=True)
    assert [r.ok for r in report.results] == [False, False]
    assert all("did not finish its pack within 2 s" in (r.error or "") for r in report.results)
    pids = [int(p.name.split("-")[1]) for p in markers.glob("stopped-*")]
    assert len(pids) == 4, "each pack: one try and one retry, each in a new process"
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)
    assert table.snapshot().version == snap.version
    assert _files_on_disk(table) == set(snap.files)
    assert sum("fails" in line and line.startswith("ERROR") for line in log_lines) == 2


@pytest.mark.slow
def test_a_table_run_whose_unit_hangs_twice_ends_failed(tmp_path: Path) -> None:
    from maintd.execution.runner import Runner

    table, _ = make_table(tmp_path, commits=12, buckets=1)
    options = ExecutionOptions(in_process_threads=1, unit_timeout_seconds=2,
                               faults={"*": f"stop:{tmp_path / 'markers'}"})
    summary = Runner(options=options, use_spark=False).run_table(table.uri)
    assert summary.engine == "in-process" and summary.tasks_planned >= 1
    assert summary.status == "failed" and summary.tasks_failed == summary.tasks_planned
    assert "did not finish its pack within 2 s" in (summary.error or "")


def test_a_dead_lanes_exit_status_is_read_once_though_the_executor_reads_it_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log_lines: list[str]) -> None:
    """The fork server reports a lane's exit status once, and the executor's own thread reads it as it cleans up
    after the death. Forced here: a run's thread that reads the status (by joining the process) while the executor's
    thread does waits for that one to read first; it would then find the report gone and say exit code 255."""
    from multiprocessing import forkserver, popen_forkserver

    polling = threading.local()
    entered: dict[int, threading.Event] = {}
    taken: dict[int, threading.Event] = {}
    real_poll, real_read = popen_forkserver.Popen.poll, forkserver.read_signed

    def poll(self, flag=os.WNOHANG):  # type: ignore[no-untyped-def]
        polling.process = id(self)
        try:
            return real_poll(self, flag)
        finally:
            polling.process = None

    def read_signed(fd: int) -> int:
        key = getattr(polling, "process", None)
        if key is None:  # the child's pid, read as it starts
            return real_read(fd)
        ours = threading.current_thread().name.startswith("maintd-job")  # the run's thread, not the executor's
        entered.setdefault(key, threading.Event())
        taken.setdefault(key, threading.Event())
        if ours:
            entered[key].set()
            taken[key].wait(10)
            return real_read(fd)
        entered[key].wait(1)  # the run's thread gets a second to come and read too, and without it reads alone
        try:
            return real_read(fd)
        finally:
            taken[key].set()

    monkeypatch.setattr(popen_forkserver.Popen, "poll", poll)
    monkeypatch.setattr(forkserver, "read_signed", read_signed)
    table, _ = make_table(tmp_path, commits=6, buckets=1)
    (result,) = execute(plan_all(table, "compact"), table, None,
                        ExecutionOptions(in_process_threads=1, faults={"*": "kill"}))
    assert not result.ok and "ended while it ran its pack (killed by signal 9)" in (result.error or "")
    deaths = [line for line in log_lines if "ended while it ran its pack" in line]
    assert len(deaths) == 3 and all("(killed by signal 9)" in line for line in deaths), deaths  # 2 + the failure


def test_a_process_that_dies_twice_fails_its_units_and_leaves_no_files(tmp_path: Path) -> None:
    table, _ = make_table(tmp_path, commits=6, buckets=2)
    snap = table.snapshot()
    results = execute(plan_all(table, "compact"), table, None,
                      ExecutionOptions(in_process_threads=2, faults={"*": "kill"}))
    assert [r.ok for r in results] == [False, False]
    assert all("ended while it ran its pack (killed by signal 9)" in (r.error or "") for r in results)
    assert table.snapshot().version == snap.version
    assert _files_on_disk(table) == set(snap.files)


def test_a_hung_pack_in_a_thread_is_reported_failed_at_its_timeout(tmp_path: Path) -> None:
    table, _ = make_table(tmp_path, commits=4, buckets=1)
    markers = tmp_path / "markers"
    options = ExecutionOptions(faults={"*": f"hold_once:{markers}"})
    specs = task_specs(plan_all(table, "compact"), table.snapshot(), options, storage=table.storage)
    with pytest.raises(UnitLostError, match="not finished within 1 s"):
        LocalBackend(1, timeout=1).run([specs])
    (markers / "release").touch()


def test_the_default_timeout_grows_with_the_input_and_the_setting_fixes_it(tmp_path: Path) -> None:
    table, _ = make_table(tmp_path, commits=4, buckets=1)
    specs = task_specs(plan_all(table, "compact"), table.snapshot(), ExecutionOptions(), storage=table.storage)
    size = sum(f.bytes for s in specs for f in s.inputs)
    assert pack_timeout(specs, ExecutionOptions()) == pytest.approx(TIMEOUT_BASE_SECONDS + size / (1 << 20))
    assert pack_timeout(specs, ExecutionOptions(unit_timeout_seconds=7)) == 7
    for text, seconds in (("90", 90), ("90s", 90), ("10m", 600), ("1h", 3600)):
        conf = type("S", (), {"conf": {"spark.maintd.task.timeout": text}})()
        assert options_from_settings(conf).unit_timeout_seconds == seconds
    for bad in ("0", "-5s", "soon"):
        conf = type("S", (), {"conf": {"spark.maintd.task.timeout": bad}})()
        with pytest.raises(ConfigError, match=r"spark\.maintd\.task\.timeout.*duration above 0"):
            options_from_settings(conf)


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


def test_a_cancelled_run_starts_no_further_pack_and_kills_a_running_one(tmp_path: Path) -> None:
    table, _ = make_table(tmp_path, commits=4, buckets=2)
    specs = task_specs(plan_all(table, "compact"), table.snapshot(), ExecutionOptions(), storage=table.storage)
    backend = ProcessBackend(1, table.uri)
    backend.cancel()
    with pytest.raises(RuntimeError, match="abandoned"):
        backend.run([specs[:1]])
    markers = tmp_path / "markers"
    held = ExecutionOptions(faults={"*": f"stop_once:{markers}"})
    specs = task_specs(plan_all(table, "compact"), table.snapshot(), held, storage=table.storage)
    backend = ProcessBackend(1, table.uri, held)
    errors: list[BaseException] = []
    thread = threading.Thread(target=lambda: _catch(errors, backend.run, [specs[:1]]))
    thread.start()
    stopped = markers / "stopped"
    pid = int(wait_until(lambda: stopped.exists() and stopped.read_text(), "the pack's process to stop"))
    backend.cancel()
    thread.join(30)
    assert not thread.is_alive() and errors and "abandoned" in str(errors[0])
    assert not Path(f"/proc/{pid}").exists()


def _catch(errors: list[BaseException], fn, *args) -> None:  # type: ignore[no-untyped-def]
    try:
        fn(*args)
    except BaseException as exc:
        errors.append(exc)


def test_a_script_with_a_main_guard_runs_plans_in_processes(tmp_path: Path) -> None:
    """As in every ``multiprocessing`` program, a child may run the main script's body (not its guarded part)."""
    table, model = make_table(tmp_path, commits=6, buckets=2)
    expected = model.table().num_rows
    script = tmp_path / "maintain.py"
    script.write_text(textwrap.dedent(f"""
        import os
        from maintd import Table
        from maintd.execution import ExecutionOptions, PlanDoc, run_plan
        print("script body ran in", os.getpid(), flush=True)
        if __name__ == "__main__":
            t = Table.open({table.uri!r})
            plan = PlanDoc.model_validate_json({plan_all(table, "compact").model_dump_json()!r})
            report = run_plan(plan, t, None, ExecutionOptions(in_process_threads=2), commit=True)
            assert report.engine == "in-process" and all(r.ok for r in report.results), report.results
            print("rows", t.read().num_rows, flush=True)
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"rows {expected}" in out.stdout
    bodies = {line.rsplit(" ", 1)[1] for line in out.stdout.splitlines() if line.startswith("script body ran")}
    assert out.stdout.count("rows") == 1 and 1 <= len(bodies) <= 4, out.stdout  # this process + 2 packs + server


def test_the_workers_setting() -> None:
    conf = type("S", (), {"conf": {"spark.maintd.inProcess.workers": "Threads"}})()
    assert options_from_settings(conf).in_process_workers == "threads"
    assert ExecutionOptions().in_process_workers == "processes"
    bad = type("S", (), {"conf": {"spark.maintd.inProcess.workers": "forks"}})()
    with pytest.raises(ConfigError, match=r"spark\.maintd\.inProcess\.workers.*'forks'.*processes.*threads"):
        options_from_settings(bad)


def test_units_at_once_follow_the_cpus_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    from maintd.execution import driver

    monkeypatch.setattr(driver, "usable_cpus", lambda: 64)
    assert driver.in_process_threads(ExecutionOptions()) == 64
    assert driver.in_process_threads(ExecutionOptions(in_process_threads=16)) == 16
    monkeypatch.setattr(driver, "usable_cpus", lambda: 2)
    assert driver.in_process_threads(ExecutionOptions()) == 2


def test_the_processes_keep_the_memory_they_free_and_the_callers_environment_is_unchanged(tmp_path: Path) -> None:
    before = dict(os.environ)
    table, _ = make_table(tmp_path, commits=4, buckets=2)
    assert all(r.ok for r in run_plan(plan_all(table, "compact"), table, None, ExecutionOptions(in_process_threads=2),
                                      commit=True).results)
    pids = lane_pids()
    assert pids
    environ = dict(line.split("=", 1) for line in Path(f"/proc/{pids[0]}/environ").read_text().split("\0") if line)
    wanted = local.lane_allocators()
    assert wanted.items() >= local.LANE_ALLOCATORS.items()
    for name, value in wanted.items():  # no jemalloc among them where the caller has a preload (the next test)
        # glibc ends the first tunable's value with a NUL in place as it parses GLIBC_TUNABLES: a prefix shows
        assert environ.get(name) and before.get(name, value).startswith(environ[name]), name
    assert dict(os.environ) == before
    if "LD_PRELOAD" not in before:  # the system's jemalloc, where it has one, is the lanes' malloc
        jemalloc = ctypes.util.find_library("jemalloc")
        assert (jemalloc is not None) == ("libjemalloc" in Path(f"/proc/{pids[0]}/maps").read_text())
        assert jemalloc is not None or os.environ.get("MAINTD_TEST_REQUIRE_JEMALLOC") != "1", \
            "no libjemalloc on this machine (Debian: apt-get install libjemalloc2)"


def test_a_caller_that_sets_a_preload_keeps_it_for_the_processes(tmp_path: Path) -> None:
    """``LD_PRELOAD`` set by the caller, even empty, stays the lanes' preload: jemalloc is not added."""
    table, _ = make_table(tmp_path, commits=4, buckets=2)
    script = _caller_script(tmp_path, table, """
        pid = lane_pids()[0]
        env = Path(f"/proc/{pid}/environ").read_text().split("\\0")
        print("jemalloc" if "libjemalloc" in Path(f"/proc/{pid}/maps").read_text() else "system",
              any(e.startswith("MALLOC_CONF=") for e in env), repr(next(e for e in env if e.startswith("LD_PRELOAD="))))
    """)
    caller = {k: v for k, v in os.environ.items() if k != "MALLOC_CONF"}  # a caller's own would be kept too
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                         env={**caller, "LD_PRELOAD": ""})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["system", "False", "'LD_PRELOAD='"], out.stdout


@pytest.mark.parametrize("caller", [None, "mimalloc"])
def test_arrow_allocates_from_the_lanes_malloc_unless_the_caller_chose_its_pool(tmp_path: Path,
                                                                               caller: str | None) -> None:
    """A child of the fork server allocates Arrow's buffers with ``malloc`` (the pool the variable names must be
    set before pyarrow's first allocation, which the server's preload makes); a pool the caller names is kept."""
    script = tmp_path / "pool.py"
    script.write_text(textwrap.dedent("""
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        from maintd.execution.local import start_fork_server

        def pool() -> str:
            import pyarrow as pa
            pa.array(range(1000))  # allocates from the pool
            return pa.default_memory_pool().backend_name

        if __name__ == "__main__":
            start_fork_server()
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("forkserver")) as ex:
                print(ex.submit(pool).result())
    """))
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                         env=env if caller is None else {**env, "ARROW_DEFAULT_MEMORY_POOL": caller})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [caller or "system"], out.stdout


def test_a_lane_keeps_what_arrow_freed_where_a_spark_task_releases_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from maintd.execution import spark as spark_mod

    released: list[str] = []
    monkeypatch.setattr(spark_mod, "release_memory", lambda: released.append("released"))
    assert spark_mod.run_pack_in_worker([], freeze=False) == []
    assert released == ["released"]
    assert local._run_pack([], {}, 0) == []
    assert released == ["released"]


def test_a_hung_pack_killed_in_one_run_costs_a_concurrent_run_nothing(tmp_path: Path) -> None:
    """Runs at once share the lanes: the lane of one run's hung pack is killed at its timeout while the other
    run's pack is in the middle of its unit in another lane, which finishes in its first attempt."""
    hung, hung_model = make_table(tmp_path / "hung", commits=10, buckets=2, seed=5)
    calm, calm_model = make_table(tmp_path / "calm", commits=10, buckets=2, seed=6)
    stop, hold = tmp_path / "stop", tmp_path / "hold"
    reports: dict[str, object] = {}
    errors: list[BaseException] = []

    def go(name: str, table, options: ExecutionOptions) -> None:  # type: ignore[no-untyped-def]
        try:
            reports[name] = run_plan(plan_all(table, "compact"), table, None, options, commit=True)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=go, args=("hung", hung, ExecutionOptions(
                   in_process_threads=2, unit_timeout_seconds=3, faults={"*": f"stop_once:{stop}"}))),
               threading.Thread(target=go, args=("calm", calm, ExecutionOptions(
                   in_process_threads=2, faults={"*": f"hold_once:{hold}"})))]
    for t in threads:
        t.start()
    stopped = int(wait_until(lambda: (stop / "stopped").exists() and (stop / "stopped").read_text(), "a stop"))
    wait_until(lambda: (hold / "held").exists(), "a held unit")
    wait_until(lambda: not _running(stopped), "the hung pack's process to be killed", timeout=30)
    assert threads[1].is_alive(), "the held run ended before the kill"
    (hold / "release").touch()
    for t in threads:
        t.join(120)
    assert not errors and not any(t.is_alive() for t in threads)
    for name, table, model in (("hung", hung, hung_model), ("calm", calm, calm_model)):
        report = reports[name]
        assert all(r.ok for r in report.results), (name, report.results)  # type: ignore[attr-defined]
        snap = table.snapshot()
        assert _files_on_disk(table) == set(snap.files) | set(snap.tombstones), name
        assert sorted_read(table).equals(model.table()), name
    assert reports["hung"].retried == 1 and reports["calm"].retried == 0  # type: ignore[attr-defined]
