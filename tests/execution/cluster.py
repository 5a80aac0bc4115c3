"""A real Spark standalone cluster on loopback: a master and one worker started with pyspark's own launcher.

``bin/spark-class`` of the installed pyspark package starts ``org.apache.spark.deploy.master.Master`` and
``...deploy.worker.Worker`` as they run in production, on free 127.0.0.1 ports, with small daemons
(256 MiB each) and a worker offering 2 cores and 1 GiB to executors. Applications reach it at
``spark://127.0.0.1:<port>``; their Python workers run this interpreter (``PYSPARK_PYTHON``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyspark
from servers import free_port, wait_answering

SPARK_HOME = Path(pyspark.__file__).parent
START_TIMEOUT = 120.0
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""JVM options for short-lived test JVMs: the C1 compiler only and a serial collector start up in half the time."""


@dataclass
class Cluster:
    master_url: str
    ui_url: str
    workdir: Path
    worker_pid: int = 0

    def state(self) -> dict:  # type: ignore[type-arg]
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=5) as r:
            return json.loads(r.read())  # type: ignore[no-any-return]

    def executor_pids(self) -> list[int]:
        """Executor JVMs the worker runs (CoarseGrainedExecutorBackend processes)."""
        cmds = dict(_processes())
        return [p for p in descendants(self.worker_pid) if "CoarseGrainedExecutorBackend" in cmds.get(p, "")]


def env() -> dict[str, str]:
    return {**os.environ, "SPARK_HOME": str(SPARK_HOME), "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": "256m", "SPARK_DAEMON_JAVA_OPTS": QUICK_JVM}


@contextlib.contextmanager
def standalone_cluster(workdir: Path, cores: int = 2, memory: str = "1g") -> Iterator[Cluster]:
    """Start a master and a worker; stop both (and their executors) on exit."""
    workdir.mkdir(parents=True, exist_ok=True)
    port, ui = free_port(), free_port()
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(_start([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                             "--port", str(port), "--webui-port", str(ui)], workdir / "master.log"))
        cluster = Cluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui}", workdir)
        _wait(lambda: cluster.state().get("status") == "ALIVE", procs, "the master")
        procs.append(_start([spark_class, "org.apache.spark.deploy.worker.Worker", cluster.master_url,
                             "--host", "127.0.0.1", "--cores", str(cores), "--memory", memory,
                             "--port", str(free_port()), "--webui-port", str(free_port()),
                             "--work-dir", str(workdir / "work")], workdir / "worker.log"))
        cluster.worker_pid = procs[-1].pid
        _wait(lambda: sum(w["state"] == "ALIVE" for w in cluster.state().get("workers", [])) == 1, procs,
              "the worker to register")
        yield cluster
    finally:
        left = descendants(procs[-1].pid) if len(procs) > 1 else []
        for p in reversed(procs):
            _stop(p)
        for pid in left:  # executors and Python workers outliving their worker
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _start(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, env=env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _wait(ready: Callable[[], object], procs: list[subprocess.Popen[bytes]], what: str) -> None:
    wait_answering(procs, ready, what, timeout=START_TIMEOUT, poll=0.5)


def _stop(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGTERM)
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=30)


def _processes() -> Iterator[tuple[int, str]]:
    for d in os.listdir("/proc"):
        if d.isdigit():
            with contextlib.suppress(OSError):
                yield int(d), Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def descendants(pid: int) -> list[int]:
    parents: dict[int, int] = {}
    for p, _ in _processes():
        with contextlib.suppress(OSError, ValueError, IndexError):
            parents[p] = parent_of(p)
    out, todo = [], [pid]
    while todo:
        cur = todo.pop()
        kids = [c for c, pp in parents.items() if pp == cur]
        out += kids
        todo += kids
    return out
