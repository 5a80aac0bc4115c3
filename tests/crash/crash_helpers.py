"""Killing ``maintd gc``, ``maintd purge`` and ``maintd run`` with SIGKILL at storage operations, and what
must hold afterwards (used by ``test_cli_crashes.py`` and ``scripts/crash_sweep.py``).

The table, of a given shape (tests/shapes.py: the sweep draws one per seed), has a known history: 40
versions six hours apart (upserts, deletes, overwrites of a partition or of the table) ending an hour ago,
168 hours of retention (so the first ones have expired), a checkpoint every 4 versions, many small files per
bucket (maintenance has work) and two orphans three hours old. The rows of every version are recorded as it
is committed. After a command is killed anywhere:

1. the table opens and every version it can still build reads exactly as recorded (the commits of the
   command, maintenance or PURGE, change no rows), and every version that retention (or a landed PURGE)
   keeps can be built;
2. the same command, run again without faults, completes;
3. once every file no version references is older than the grace, ``maintd gc`` leaves exactly the data
   files the retained versions read: the orphans the kill left are gone, nothing needed is.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.acero  # imported before freezegun swaps datetime.date, which its C module checks on import
from freezegun import freeze_time
from shapes import Shape, build

from maintd import Table, VersionNotFoundError
from maintd.storage.faulty import Fault, FaultPlan
from maintd.table.log.timeline import commit_info
from maintd.table.read.reader import read_snapshot

CLI = Path(__file__).with_name("crashing_cli.py")
STEP = timedelta(hours=6)
VERSIONS = 40
RETAIN_HOURS = 168
GRACE_HOURS = 1
POLICY = """
default:
  compaction:
    max_delta_files: 4
    min_interval_hours: 0
"""
CONFIG = """
state_dir: {state}
spark:
  master: "local[1]"
  driver_memory: 512m
  conf:
    spark.sql.shuffle.partitions: "1"
    spark.default.parallelism: "1"
reclaim:
  orphan_grace_hours: {grace}
policy:
  path: {policy}
"""
Rows = list[dict[str, Any]]
SHAPE = build("id int64 key, string partition", [("id", "int64")], [("ds", "string")], values=1, texts=1)
"""The shape of the template unless one is given."""


@dataclass
class Template:
    """A table with a recorded history, to copy for each kill."""

    root: Path
    reads: dict[int, Rows]
    times: dict[int, datetime]
    shape: Shape = SHAPE

    @property
    def latest(self) -> int:
        return max(self.reads)

    def copy(self, to: Path) -> Path:
        shutil.copytree(self.root, to)
        return to


def rows(t: pa.Table, shape: Shape = SHAPE) -> Rows:
    """The rows of a read in the order of their identity (partition values and key)."""
    return sorted(t.to_pylist(), key=lambda r: repr(shape.identity(r)))


def _write(table: Table, shape: Shape, i: int, rng: np.random.Generator) -> int:
    data = shape.rows(rng, rng.integers(0, 30, 4), f"v{i}")
    if i % 7 == 6:
        if not shape.partition_by or i % 14 == 13:
            return table.overwrite(shape.batch(data))
        spec = {c: data[0][c] for c in shape.partition_by}
        return table.overwrite(shape.batch([r for r in data if all(r[c] == v for c, v in spec.items())]),
                               partition=spec)
    if i % 5 == 4:
        return table.delete(shape.batch(shape.keys_only(data[:2]), shape.identity_columns))
    return table.upsert(shape.batch(data))


def build_template(root: Path, shape: Shape = SHAPE) -> Template:
    """A table of ``shape`` with its history recorded, and two orphans three hours old in one of its buckets."""
    end = datetime.now(UTC) - timedelta(hours=1)
    rng = np.random.default_rng(4)
    with freeze_time(end - STEP * VERSIONS) as clock:
        table = shape.create(str(root), **{"acid.data.retain.hours": RETAIN_HOURS, "log.checkpoint.interval": 4})
        template = Template(root, {0: []}, {0: datetime.now(UTC)}, shape)
        for i in range(VERSIONS):
            clock.tick(STEP)
            v = _write(table, shape, i, rng)
            template.times[v], template.reads[v] = datetime.now(UTC), rows(table.read(), shape)
    bucket = sorted(Path(p).parent for p in table.snapshot().files)[0]
    for name in ("e" * 32, "f" * 32):
        orphan = root / bucket / f"delta-L0-{name}.parquet"
        orphan.write_bytes(b"PAR1 left by a writer that died before its commit")
        age(orphan, hours=3)
    return template


def age(path: Path, hours: float) -> None:
    t = time.time() - hours * 3600
    os.utime(path, (t, t))


def write_config(directory: Path) -> Path:
    policy = directory / "policy.yaml"
    policy.write_text(POLICY)
    config = directory / "maintd.yaml"
    config.write_text(CONFIG.format(state=directory / "state", grace=GRACE_HOURS, policy=policy))
    return config


def command_args(command: str, uri: str, config: Path) -> list[str]:
    if command == "gc":
        return ["gc", uri, "--config", str(config)]
    if command == "purge":
        return ["purge", uri, "--yes", "--config", str(config)]
    return ["run", uri, "--config", str(config)]


def run_command(command: str, uri: str, config: Path, faults: list[Fault] | None = None,
                timeout: float = 600) -> subprocess.CompletedProcess[str]:
    plan = FaultPlan(faults or [])
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    return subprocess.run([sys.executable, str(CLI), plan.to_json(), *command_args(command, uri, config)],
                          capture_output=True, text=True, timeout=timeout, env=env)


def storage_operations(done: subprocess.CompletedProcess[str]) -> int:
    for line in reversed(done.stderr.splitlines()):
        if line.startswith("storage operations: "):
            return int(line.split(": ", 1)[1])
    raise AssertionError(f"the command did not report its storage operations:\n{done.stderr[-2000:]}")


def _expected(template: Template, version: int) -> Rows:
    return template.reads[min(version, template.latest)]


def required_oldest(template: Template, table: Table, now: datetime) -> int:
    """The oldest version that must still be buildable: retention's (Delta's rule), or a landed PURGE."""
    cutoff = now - timedelta(hours=RETAIN_HOURS)
    oldest = max((v for v, t in template.times.items() if t <= cutoff), default=0)
    for v in range(template.latest + 1, table.version + 1):
        info = commit_info(table.log, v)
        if info is not None and info.operation == "PURGE":
            oldest = max(oldest, v)
    return oldest


def check_reads(template: Template, uri: str, now: datetime) -> tuple[list[str], int]:
    """Every buildable version reads as recorded, and every version that must be kept is buildable.

    Returns the problems found and the oldest buildable version.
    """
    problems: list[str] = []
    try:
        table = Table.open(uri)
        latest = table.version
    except Exception as exc:
        return [f"the table cannot be opened: {type(exc).__name__}: {exc}"], 0
    v = latest
    while v >= 0:
        try:
            got = rows(read_snapshot(table.storage, table.snapshot(v)), template.shape)
        except VersionNotFoundError:
            break
        except Exception as exc:
            problems.append(f"version {v} cannot be read: {type(exc).__name__}: {exc}")
            break
        if got != _expected(template, v):
            problems.append(f"version {v} reads {len(got)} rows, not the {len(_expected(template, v))} recorded")
        v -= 1
    oldest = v + 1
    required = required_oldest(template, table, now)
    if oldest > required:
        problems.append(f"versions {required}..{oldest - 1} must be kept but cannot be built")
    return problems, oldest


def check_orphans_go(template: Template, uri: str, config: Path) -> list[str]:
    """Age every unreferenced file past the grace; ``maintd gc`` must then leave exactly the needed files."""
    table = Table.open(uri)
    root = Path(uri)
    _, oldest = check_reads(template, uri, datetime.now(UTC))
    needed = set().union(*(table.snapshot(v).files for v in range(oldest, table.version + 1)))
    for p in root.rglob("*"):
        if p.is_file() and "_log" not in p.parts and p.relative_to(root).as_posix() not in needed:
            age(p, hours=GRACE_HOURS + 2)
    done = run_command("gc", uri, config)
    if done.returncode != 0:
        return [f"gc after the grace failed ({done.returncode}): {done.stderr[-1500:]}"]
    table = Table.open(uri)
    _, oldest = check_reads(template, uri, datetime.now(UTC))
    needed = set().union(*(table.snapshot(v).files for v in range(oldest, table.version + 1)))
    on_disk = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and "_log" not in p.parts}
    problems = []
    if on_disk - needed:
        problems.append(f"orphans left after the grace: {sorted(on_disk - needed)[:3]}")
    if needed - on_disk:
        problems.append(f"files a retained version reads are gone: {sorted(needed - on_disk)[:3]}")
    return problems


def kill_and_recover(template: Template, command: str, workdir: Path, *kills: list[Fault],
                     timeout: float = 600) -> tuple[bool, list[str]]:
    """Kill ``command`` once per item of ``kills`` (its fault rules) on one copy of the template, checking the
    table after each kill, then run it again and check (module docstring).

    Returns whether every run was killed, and the problems found.
    """
    uri = str(template.copy(workdir / "t"))
    config = write_config(workdir)
    problems: list[str] = []
    every = True
    for faults in kills:
        killed = run_command(command, uri, config, faults, timeout)
        every = every and killed.returncode == -9
        if killed.returncode not in (0, -9):
            problems.append(f"{command} failed instead of being killed ({killed.returncode}): "
                            f"{killed.stderr[-1500:]}")
        problems += check_reads(template, uri, datetime.now(UTC))[0]
    again = run_command(command, uri, config, None, timeout)
    if again.returncode != 0:
        problems.append(f"{command} after the kill failed ({again.returncode}): {again.stderr[-1500:]}")
    problems += check_reads(template, uri, datetime.now(UTC))[0]
    problems += check_orphans_go(template, uri, config)
    described = json.dumps([[f.__dict__ for f in faults] for faults in kills])
    return every, [f"{command} {described}: {p}" for p in problems]
