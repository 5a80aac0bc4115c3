"""maintd's PySpark daemon module: the worker's input acknowledges at once, everything else is PySpark's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from maintd.execution.spark import DAEMON_MODULE, DAEMON_MODULE_CONF, with_daemon_module

# A forked worker's first task, as the daemon runs it, over a real loopback TCP connection: PySpark's own
# worker() reads the JVM's secret through the input stream it opens and answers; a wrong secret ends the task
# before the worker module is imported, so the whole exchange runs without a JVM.
_WORKER_SCRIPT = textwrap.dedent("""
    import json, os, socket, sys
    from pyspark.serializers import UTF8Deserializer, write_with_length
    import maintd.pyspark_daemon as d

    reads = []
    readinto = d.QuickAckReader.readinto
    def counting(self, buffer):
        n = readinto(self, buffer)
        reads.append(n)
        return n
    d.QuickAckReader.readinto = counting
    os.environ["PYTHON_WORKER_FACTORY_SECRET"] = "right"
    stock_fdopen = os.fdopen

    family = socket.AF_UNIX if sys.argv[1] == "unix" else socket.AF_INET
    if family == socket.AF_INET:
        listener = socket.create_server(("127.0.0.1", 0))
        jvm = socket.create_connection(listener.getsockname())
        sock, _ = listener.accept()
    else:
        jvm, sock = socket.socketpair()
    jvm_out = jvm.makefile("wb")
    write_with_length(b"wrong", jvm_out)
    jvm_out.flush()
    code = d.worker(sock, False)
    answer = UTF8Deserializer().loads(jvm.makefile("rb"))
    r, w = os.pipe()
    os.write(w, b"x")
    with os.fdopen(r, "rb") as pipe:  # a task's own fdopen after the worker is the real one
        own = type(pipe.raw).__name__
    print(json.dumps({"code": code, "answer": answer, "reads": reads, "restored": os.fdopen is stock_fdopen,
                      "own": own}))
""")


def run_worker(family: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", _WORKER_SCRIPT, family], capture_output=True, text=True,
                         timeout=60, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="TCP_QUICKACK is Linux's")
def test_a_tcp_worker_reads_its_task_through_the_quick_ack_reader() -> None:
    got = run_worker("tcp")
    assert got["code"] == 1 and got["answer"] == "err"  # PySpark's own authentication ran, and refused
    reads = got["reads"]
    assert isinstance(reads, list) and sum(reads) == 4 + len(b"wrong"), reads
    assert got["restored"] is True and got["own"] == "FileIO"


def test_a_unix_socket_worker_is_pyspark_s_own() -> None:
    got = run_worker("unix")
    assert got["code"] == 1 and got["answer"] == "err"
    assert got["reads"] == [] and got["restored"] is True


def test_sessions_maintd_builds_run_its_daemon_only_when_asked_and_not_told_otherwise() -> None:
    assert DAEMON_MODULE_CONF not in with_daemon_module({}), "off by default"
    assert with_daemon_module({}, enabled=True)[DAEMON_MODULE_CONF] == DAEMON_MODULE
    theirs = {DAEMON_MODULE_CONF: "pyspark.daemon"}
    assert with_daemon_module(theirs, enabled=True)[DAEMON_MODULE_CONF] == "pyspark.daemon"
    # Code shipped with the application reaches a task's path, not the daemon's: PySpark's daemon then.
    assert DAEMON_MODULE_CONF not in with_daemon_module({"spark.submit.pyFiles": "maintd.zip"}, enabled=True)


_FREEZE_SCRIPT = textwrap.dedent("""
    import gc, json, socket, sys, weakref
    import maintd.pyspark_daemon as d

    class Node:
        pass

    def task(importing):
        def stock_worker(sock, authenticated):
            if importing:
                import colorsys  # a module the worker had not imported
            a, b = Node(), Node()
            a.b, b.a = b, a  # garbage in a cycle: only a collection frees it
            task.garbage = weakref.ref(a)
            task.kept = Node()  # survives the task
            return 0
        d._stock_worker = stock_worker
        listener = socket.create_server(("127.0.0.1", 0))
        jvm = socket.create_connection(listener.getsockname())
        sock, _ = listener.accept()
        return d.worker(sock, True)

    out = {}
    assert task(True) == 0
    out["first"] = {"frozen": gc.get_freeze_count(), "garbage_freed": task.garbage() is None,
                    "kept_frozen": gc.is_tracked(task.kept) and task.kept not in gc.get_objects()}
    frozen = gc.get_freeze_count()
    assert task(False) == 0
    out["second"] = {"frozen_more": gc.get_freeze_count() - frozen, "garbage_freed": task.garbage() is None}
    gc.collect()
    out["collected_after"] = task.garbage() is None
    print(json.dumps(out))
""")


def test_a_worker_freezes_what_its_imports_left_and_collects_what_tasks_drop() -> None:
    out = subprocess.run([sys.executable, "-c", _FREEZE_SCRIPT], capture_output=True, text=True, timeout=60,
                         check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    # The task that imported: collected first (its cycle freed), then what survived frozen.
    first = got["first"]
    assert first["garbage_freed"] is True and first["kept_frozen"] is True and first["frozen"] > 1000
    # A task that imported nothing freezes nothing (frozen objects its code dropped are freed: the count
    # may fall); its cycle is left to the daemon's own collection.
    assert got["second"]["frozen_more"] <= 0 and got["second"]["garbage_freed"] is False
    assert got["collected_after"] is True


# The daemon as Spark runs it, up to its first fork: preload, then a forked worker runs real units. The specs
# come from a file, so the parent has imported nothing but what the preload imports.
_PRELOAD_SCRIPT = textwrap.dedent("""
    import json, os, sys, threading
    import maintd.pyspark_daemon as d

    assert "pyarrow" not in sys.modules  # importing the daemon module loads nothing of maintd's
    ok = d.preload()
    loaded = set(sys.modules)
    threads = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
    parent = {"ok": ok, "python_threads": threading.active_count(), "threads": threads,
              "blas": os.environ.get("OPENBLAS_NUM_THREADS"), "marker": os.environ.get(d.PRELOADED_ENV),
              "settled": d._modules_at_freeze == len(sys.modules)}
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a worker: the units' imports, results and what the collector still walks
        import gc
        from maintd.execution.rewrite import run_pack_json
        with open(sys.argv[1]) as fh:
            specs = json.load(fh)
        results = [json.loads(x) for x in run_pack_json(specs)]
        heavy = ("maintd", "pyarrow", "pandas", "numpy")
        new = sorted(m for m in set(sys.modules) - loaded if m.split(".")[0] in heavy)
        written = [a["path"] for x in results for a in x["adds"]]
        os.write(w, json.dumps({"ok": [x["ok"] for x in results], "written": written, "imported": new,
                                "frozen": gc.get_freeze_count()}).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as fh:
        child = json.loads(fh.read())
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"parent": parent, "child": child, "status": status}))
""")


def _run_preload(tmp_path: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    from maintd.execution import ExecutionOptions, task_specs

    from .helpers import make_table, plan_all

    table, _ = make_table(tmp_path, commits=6, rows=300, buckets=2)
    specs = task_specs(plan_all(table, "cluster", level=1), table.snapshot(), ExecutionOptions())
    (tmp_path / "specs.json").write_text(json.dumps([s.model_dump_json() for s in specs]))
    inherited = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "MAINTD_WORKER_PRELOAD")}
    out = subprocess.run([sys.executable, "-c", _PRELOAD_SCRIPT, str(tmp_path / "specs.json")], capture_output=True,
                         text=True, timeout=120, check=True, env={**inherited, **(env or {})})
    got: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    got["table"] = table
    return got


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and forks")
def test_a_worker_forked_after_the_preload_runs_units_without_importing_anything(tmp_path: Path) -> None:
    got = _run_preload(tmp_path, {"MAINTD_WORKER_PRELOAD": "1"})
    parent, child = got["parent"], got["child"]
    assert parent["ok"] is True and parent["settled"] is True and int(parent["marker"]) > 500
    # Safe to fork: no Python thread but the main one, and no native one but jemalloc's background thread.
    assert parent["python_threads"] == 1
    assert all(t == "jemalloc_bg_thd" for t in parent["threads"][1:]), parent["threads"]
    assert parent["blas"] == "1"
    # The worker ran every unit, imported nothing of maintd, pyarrow, pandas or numpy, and inherited the frozen
    # generation (its collections never walk the preloaded modules).
    assert got["status"] == 0 and child["ok"] and all(child["ok"]), child
    assert child["imported"] == [], child["imported"]
    assert child["frozen"] > 10_000
    assert all((tmp_path / "t" / p).exists() for p in child["written"]) and child["written"]


@pytest.mark.parametrize("value", [None, "0"])
def test_the_preload_is_off_unless_the_executors_environment_asks_for_it(tmp_path: Path, value: str | None) -> None:
    env = {"MAINTD_WORKER_PRELOAD": value} if value is not None else {}
    got = _run_preload(tmp_path, env)
    parent, child = got["parent"], got["child"]
    assert parent["ok"] is False and parent["marker"] is None
    assert got["status"] == 0 and all(child["ok"])
    assert "maintd.execution.rewrite" in child["imported"]  # the worker imported it for itself, as before


def test_a_failing_preload_is_reported_and_the_daemon_goes_on(monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    import maintd.pyspark_daemon as d
    import maintd.worker_preload as preload_module

    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    monkeypatch.setenv(d.PRELOAD_ENV, "1")
    monkeypatch.delenv(d.PRELOADED_ENV, raising=False)
    monkeypatch.setattr(preload_module, "WORKER_MODULES", ("maintd.no_such_module",))
    assert d.preload() is False
    err = capsys.readouterr().err
    assert "preloading maintd for the workers failed (ModuleNotFoundError" in err
    assert "each worker imports it on its first task" in err
    assert d.PRELOADED_ENV not in os.environ


def test_nothing_the_preload_prints_reaches_the_standard_output_the_jvm_reads_the_port_from(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import maintd.pyspark_daemon as d
    import maintd.worker_preload as preload_module

    def noisy() -> None:
        print("a module that prints on import")
        raise RuntimeError("and then fails")

    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    monkeypatch.setenv(d.PRELOAD_ENV, "1")
    monkeypatch.setattr(preload_module, "preload_worker", noisy)
    assert d.preload() is False
    out, err = capsys.readouterr()
    assert out == "" and "a module that prints on import" in err and "RuntimeError: and then fails" in err
