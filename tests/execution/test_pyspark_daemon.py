"""maintd's PySpark daemon module: the worker's input acknowledges at once, everything else is PySpark's."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

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


def test_sessions_maintd_builds_run_its_daemon_unless_told_otherwise() -> None:
    assert with_daemon_module({})[DAEMON_MODULE_CONF] == DAEMON_MODULE
    assert with_daemon_module({DAEMON_MODULE_CONF: "pyspark.daemon"})[DAEMON_MODULE_CONF] == "pyspark.daemon"
    # Code shipped with the application reaches a task's path, not the daemon's: PySpark's daemon then.
    assert DAEMON_MODULE_CONF not in with_daemon_module({"spark.submit.pyFiles": "maintd.zip"})


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
