"""Real concurrency and crashes: separate OS processes commit to one table through the log alone.

Four processes append at once while a fifth changes properties and a sixth compacts buckets.
Afterwards the versions are dense, every commit a process was told about is in the log (and no
other), every conflict raised is the one the conflict table names, no failed commit left a file
behind, and the table reads as the model built from the landed commits in version order.

A writer killed with SIGKILL after writing its data but before its commit is published leaves
the table readable and unchanged.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from waiting import wait_until

from maintd import Table

from .table_helpers import CONFLICTS, LEVELS, Model, data_files_on_disk, log_versions, sorted_rows

WORKER = Path(__file__).with_name("table_worker.py")
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("ds", pa.string()), ("name", pa.string())])
KIND = {"UPSERT": "append", "SET PROPERTIES": "metadata change", "OPTIMIZE": "compaction"}
ROLE_KIND = {"append": "append", "properties": "metadata change", "rewrite": "compaction"}


def start(role: str, uri: str, go: Path, out: Path, count: int = 0, seed: int = 0,
          env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(WORKER), role, uri, str(go), str(out), str(count), str(seed)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=WORKER.parent,
                            env=None if env is None else {**os.environ, **env})


def wait_ready(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        assert p.stdout is not None
        line = p.stdout.readline()
        assert line.strip() == "ready", f"worker did not start: {line!r} {p.stderr.read() if p.stderr else ''}"


def seed_table(root: Path | str, level: str) -> tuple[Table, Model]:
    table = Table.create(str(root), SCHEMA, primary_key="id", partition_by="ds", buckets=3,
                         properties={"isolation.level": level})
    model = Model(tuple(SCHEMA.names), ("id",), ("ds",))
    model.unchanged(0)
    rows = [{"id": i, "ds": ds, "name": "seed"} for i in range(40) for ds in ("a", "b")]
    model.upsert(table.upsert(pa.Table.from_pylist(rows, schema=SCHEMA)), rows)
    return table, model


@pytest.mark.slow
@pytest.mark.parametrize("level", LEVELS)
def test_processes_appending_while_properties_change_and_maintenance_rewrites(tmp_path: Path, level: str) -> None:
    appending_while_properties_change_and_maintenance_rewrites(str(tmp_path / "t"), tmp_path, level)


def appending_while_properties_change_and_maintenance_rewrites(root: str, tmp_path: Path, level: str,
                                                               env: dict[str, str] | None = None) -> None:
    """Four appending processes, one changing properties, one rewriting buckets, on the table at ``root``."""
    _, model = seed_table(root, level)
    go = tmp_path / "go"
    roles = [("append", 6, seed) for seed in range(4)] + [("properties", 3, 10), ("rewrite", 3, 11)]
    outs = [tmp_path / f"out-{i}.json" for i in range(len(roles))]
    procs = [start(role, root, go, out, count, seed, env) for (role, count, seed), out in zip(roles, outs, strict=True)]
    try:
        wait_ready(procs)
        go.touch()
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    results = [json.loads(out.read_text()) for out in outs]

    latest = Table.open(root)
    history = {r.version: r for r in latest.history()}
    assert log_versions(root) == list(range(latest.version + 1)), "versions must be dense"

    claimed = [0, 1]  # create and seed
    landed: list[tuple[int, list[dict[str, Any]]]] = []
    conflicts = 0
    for res in results:
        loser = ROLE_KIND[res["role"]]
        for o in res["outcomes"]:
            if "version" in o:
                claimed.append(o["version"])
                assert KIND[history[o["version"]].operation] == loser, f"version {o['version']} is not {loser}"
                if "rows" in o:
                    landed.append((o["version"], o["rows"]))
                continue
            conflicts += 1
            winner = history[o["winner_version"]].operation
            assert winner == o["winner_operation"]
            expected = CONFLICTS[KIND[winner]][loser][LEVELS.index(level)]
            assert o["error"] == expected, f"{loser} lost to {winner}: raised {o['error']}, the table says {expected}"
    assert sorted(claimed) == list(range(latest.version + 1)), "each version is the commit of exactly one process"
    # The race this test is about happened: the compactions read a version another process had passed,
    # so each had to retry past a concurrent commit or lose to it with the conflict the table names.
    rewrites = next(res["outcomes"] for res in results if res["role"] == "rewrite")
    raced = [o for o in rewrites if o["raced"]]
    assert raced, f"the compactions must commit past concurrent commits: {rewrites}"
    assert all(o["attempts"] >= 2 or "error" in o for o in raced), rewrites
    assert conflicts + sum(o["attempts"] - 1 for o in rewrites if "version" in o) >= len(raced)
    assert len(landed) == 4 * 6, "every append eventually lands"

    for version, rows in sorted(landed, key=lambda vr: vr[0]):
        model.upsert(version, rows)
    assert sorted_rows(latest.read(), ("ds", "id")) == model.visible()
    snap = latest.snapshot()
    assert data_files_on_disk(root) <= set(snap.files) | set(snap.tombstones), "a failed commit left files behind"


@pytest.mark.parametrize("role", ["hang-before-commit", "hang-in-publish"])
def test_a_writer_killed_before_its_commit_is_published_changes_nothing(tmp_path: Path, role: str) -> None:
    root = tmp_path / "t"
    table, model = seed_table(root, "WriteSerializable")
    before_version, before_files = table.version, data_files_on_disk(root)
    go = tmp_path / "go"
    proc = start(role, str(root), go, tmp_path / "out.json")
    try:
        wait_ready([proc])
        go.touch()
        marker = go.with_suffix(".hanging")

        def hanging() -> bool:
            assert proc.poll() is None, proc.communicate()[1]
            return marker.exists()

        wait_until(hanging, "the writer to reach its commit")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL

    assert len(data_files_on_disk(root) - before_files) == 2, "the writer had written its data files"
    reopened = Table.open(str(root))
    assert reopened.version == before_version
    assert sorted_rows(reopened.read(), ("ds", "id")) == model.visible()
    assert set(reopened.snapshot().files) == before_files
    rows = [{"id": 1, "ds": "a", "name": "after"}]
    model.upsert(reopened.upsert(pa.Table.from_pylist(rows, schema=SCHEMA)), rows)
    assert reopened.version == before_version + 1
    assert sorted_rows(Table.open(str(root)).read(), ("ds", "id")) == model.visible()
