"""A table written by a process, then written and read by a child it forked (the ``fork`` start method).

Gunicorn, Celery's prefork pool, ``multiprocessing`` (fork, Python's default on Linux before 3.14) and PySpark's
worker daemon fork after the parent has used maintd: the child inherits module-global thread pools without their
threads and object-store clients whose connections the parent still holds. Each child here must finish within a
deadline; before the thread pools were made fork-safe (``maintd.storage.threads``) the child waited forever in
``LocalStorage.make_durable_many``.
"""

from __future__ import annotations

import multiprocessing as mp
from typing import Any

import pyarrow as pa
import pytest

from maintd import Table

DEADLINE = 60.0
"""Seconds a child may take (it takes well under one): a hung child fails the test instead of hanging it."""


def _child(uri: str, options: dict[str, str] | None, queue: Any) -> None:
    try:
        if options is not None:  # the parent's registration is inherited; registering again must not matter
            from maintd.storage import configure_storage

            configure_storage(uri.rsplit("/", 1)[0], options)
        table = Table.open(uri)
        version = table.upsert(pa.table({"id": pa.array([100, 101], pa.int64()), "ds": ["a", "b"],
                                         "name": ["child", "child"]}))
        queue.put(("ok", version, sorted(table.read().column("id").to_pylist())))
    except BaseException as exc:  # reported to the parent, which fails the test with it
        queue.put(("error", f"{type(exc).__name__}: {exc}", []))


def _write_then_fork(uri: str, options: dict[str, str] | None = None) -> None:
    table = Table.create(uri, "id:int64!,name:string,ds:string", primary_key="id", partition_by="ds", buckets=4)
    table.upsert(pa.table({"id": pa.array(range(20), pa.int64()), "ds": ["a", "b"] * 10,
                           "name": [f"n{i}" for i in range(20)]}))
    assert table.read().num_rows == 20  # the parent's pools, clients and runtimes are all in use now
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child, args=(uri, options, queue))
    child.start()
    child.join(DEADLINE)
    if child.is_alive():
        child.kill()
        child.join()
        pytest.fail(f"the forked child did not finish within {DEADLINE:.0f} s (it hung)")
    status, version, ids = queue.get(timeout=5)
    assert status == "ok", version
    assert version == 2 and ids == [*range(20), 100, 101]
    # the parent goes on writing after its child did
    assert table.upsert(pa.table({"id": pa.array([7], pa.int64()), "ds": ["b"], "name": ["parent"]})) == 3
    assert Table.open(uri).read().num_rows == 22


def test_a_child_forked_after_the_parent_wrote_writes_and_reads_a_local_table(tmp_path: Any) -> None:
    _write_then_fork(str(tmp_path / "t"))



def test_a_child_forked_after_the_parent_wrote_writes_and_reads_a_table_on_s3(s3_root: str, s3_server: Any) -> None:
    _write_then_fork(f"{s3_root}/t", s3_server.options)


def _open_in_child(uri: str, queue: Any) -> None:
    try:
        Table.open(uri).read()
        queue.put(("ok", ""))
    except BaseException as exc:
        queue.put((type(exc).__name__, str(exc)))


def test_a_child_forked_after_the_parent_used_azure_is_refused_with_what_to_do(azure_root: str) -> None:
    uri = f"{azure_root}/t"
    Table.create(uri, "id:int64!,name:string", primary_key="id").upsert(
        pa.table({"id": pa.array([1], pa.int64()), "name": ["a"]}))
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_open_in_child, args=(uri, queue))
    child.start()
    child.join(DEADLINE)
    assert not child.is_alive(), "the forked child hung"
    kind, message = queue.get(timeout=5)
    assert kind == "ForkedProcessError" and "spawn" in message, (kind, message)
    assert Table.open(uri).read().num_rows == 1  # the parent is unaffected
