"""Packs of tasks in one Spark task, the version-ordered merge, and the worker's zip-cache freeze (no Spark)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
import zipimport
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from maintd import Table
from maintd.execution import (
    ExecutionOptions,
    TaskSpec,
    commit_rewrites,
    execute,
    pack_tasks,
    run_pack,
    run_pack_json,
    run_task,
    run_task_json,
    scheduler,
    task_specs,
)
from maintd.execution import spark as spark_mod
from maintd.execution.merge import in_version_order, merge_chunk
from maintd.execution.specs import PlanDoc, PlanTaskDoc, TaskResult
from maintd.table.files.merge import latest_rows, sort_by_key_version

from .helpers import SCHEMA, Model, batch, make_table, plan_all, sorted_read


def _rows(table: Table, r: TaskResult) -> pa.Table:
    [add] = r.adds
    return pq.read_table(table.storage.full_path(add.path))


def _specs(table: Table, kind: str, **update: Any) -> list[TaskSpec]:
    specs = task_specs(plan_all(table, kind, level=1), table.snapshot())
    return [s.model_copy(update=update) for s in specs]


def test_packs_cover_every_task_once_and_balance_the_cost(tmp_path: Path) -> None:
    table, _ = make_table(tmp_path, commits=6, buckets=8)
    specs = _specs(table, "compact")
    for slices in (1, 2, 3, 8, 50):
        packs = pack_tasks(specs, slices)
        assert sorted(i for p in packs for i in p) == list(range(len(specs)))
        assert len(packs) == min(slices, len(specs)) and all(packs)
        assert pack_tasks(specs, slices) == packs  # deterministic
    costs = [scheduler.task_cost(s) for s in specs]
    loads = [sum(costs[i] for i in p) for p in pack_tasks(specs, 2)]
    assert max(loads) - min(loads) <= max(costs)  # LPT: never off by more than one task
    # the costliest task goes first in its pack, and the costliest pack first
    packs = pack_tasks(specs, 3)
    for p in packs:
        assert [costs[i] for i in p] == sorted((costs[i] for i in p), reverse=True)
    assert [sum(costs[i] for i in p) for p in packs] == sorted((sum(costs[i] for i in p) for p in packs), reverse=True)


def test_spark_tasks_are_sized_by_input_and_cover_every_core(tmp_path: Path) -> None:
    table, _ = make_table(tmp_path, commits=6, buckets=8)
    specs = _specs(table, "compact")
    total = sum(scheduler.task_cost(s) for s in specs)
    assert scheduler.pack_count(specs, total * 10, cores=3) == 3  # small input: one per core
    assert scheduler.pack_count(specs, total * 10, cores=64) == len(specs)  # never more than the units
    assert scheduler.pack_count(specs, total // 4, cores=1) in (4, 5)  # large input: one per task_input_bytes


@pytest.mark.parametrize("kind", ["cluster", "compact"])
@pytest.mark.parametrize("threads", [1, 3])
def test_a_pack_writes_what_one_task_each_writes(tmp_path: Path, kind: str, threads: int) -> None:
    table, _ = make_table(tmp_path, commits=12, buckets=4)
    specs = _specs(table, kind)
    alone = [run_task(s) for s in specs]
    packed = run_pack([s.model_dump_json() for s in specs], threads)
    assert [r.task_id for r in packed] == [s.task_id for s in specs]
    for a, b in zip(alone, packed, strict=True):
        assert a.ok and b.ok and a.mode == b.mode == "memory"
        assert (a.rows_read, a.rows_written) == (b.rows_read, b.rows_written)
        assert _rows(table, a).equals(_rows(table, b))
        [aa], [ba] = a.adds, b.adds
        assert aa.path != ba.path
        assert aa.model_dump(exclude={"path", "bytes"}) == ba.model_dump(exclude={"path", "bytes"})
        assert set(b.phases) == {"read", "merge", "write"}


@pytest.mark.parametrize("threads", [1, 2])
def test_a_failing_task_in_a_pack_does_not_fail_the_others(tmp_path: Path, threads: int) -> None:
    table, _ = make_table(tmp_path, commits=10, buckets=4)
    specs = _specs(table, "compact")
    victim = specs[1].task_id
    faulty = [s.model_copy(update={"fault": "after_first_chunk"}) if s.task_id == victim else s for s in specs]
    payload = [s.model_dump_json() for s in faulty]
    payload.insert(2, '{"task_id": "broken", "kind": "compact", "inputs": [{"path": "x.parquet"}]}')
    results = [TaskResult.model_validate_json(x) for x in run_pack_json(payload, threads)]
    by_id = {r.task_id: r for r in results}
    assert len(results) == len(payload)
    assert not by_id[victim].ok and "injected fault" in (by_id[victim].error or "")
    assert not by_id["broken"].ok and by_id["broken"].inputs == ("x.parquet",)
    assert "invalid task spec" in (by_id["broken"].error or "")
    others = [r for r in results if r.task_id not in (victim, "broken")]
    assert len(others) == len(specs) - 1 and all(r.ok and len(r.adds) == 1 for r in others)
    for r in others:  # the others' outputs are there, the victim's partial output is gone
        assert table.storage.exists(r.adds[0].path)
    written = {f.path for f in table.storage.walk() if f.path.startswith("bucket-")}
    assert written == set(table.snapshot().files) | {a.path for r in others for a in r.adds}


def test_execute_with_options_from_spark_conf() -> None:
    opts = spark_mod.options_from_settings(type("S", (), {"conf": {
        "spark.maintd.task.memory": "64m", "spark.maintd.task.inputBytes": "1g", "spark.maintd.task.packThreads": "2",
        "spark.maintd.task.readThreads": "8", "spark.maintd.task.decodeThreads": "3",
        "spark.maintd.faults": '{"*": "after_first_chunk"}'}})())
    assert (opts.task_memory_bytes, opts.task_input_bytes, opts.pack_threads) == (64 << 20, 1 << 30, 2)
    assert (opts.read_threads, opts.decode_threads) == (8, 3)
    assert opts.fault_of("any") == "after_first_chunk"
    assert ExecutionOptions().task_input_bytes == 256 << 20 and ExecutionOptions().pack_threads == 1
    assert (ExecutionOptions().read_threads, ExecutionOptions().decode_threads) == (4, 1)


@pytest.mark.parametrize("options", [ExecutionOptions(), ExecutionOptions(read_threads=2, decode_threads=3)])
def test_a_unit_fetches_on_its_read_threads_and_decodes_on_its_decode_threads(
        tmp_path: Path, monkeypatch: Any, options: ExecutionOptions) -> None:
    import maintd.execution.rewrite as rewrite

    table, _ = make_table(tmp_path, commits=6, buckets=2)
    seen: dict[str, list[int]] = {"fetch": [], "decode": []}
    real_fetch, real_read = rewrite.fetch_all, rewrite.read_all

    def fetch_all(storage: Any, files: Any, threads: int, *args: Any) -> Any:
        seen["fetch"].append(threads)
        return real_fetch(storage, files, threads, *args)

    def read_all(metadata: Any, files: Any, data: Any, threads: int, *args: Any, **kwargs: Any) -> Any:
        seen["decode"].append(threads)
        return real_read(metadata, files, data, threads, *args, **kwargs)

    monkeypatch.setattr(rewrite, "fetch_all", fetch_all)
    monkeypatch.setattr(rewrite, "read_all", read_all)
    specs = task_specs(plan_all(table, "cluster", level=1), table.snapshot(), options)
    results = run_pack([s.model_dump_json() for s in specs])
    assert all(r.ok for r in results) and len(results) == 2
    assert seen == {"fetch": [options.read_threads] * 2, "decode": [options.decode_threads] * 2}


# -- the merge ---------------------------------------------------------------------------------------------------


def _random_versions(rng: np.random.Generator, files: int, rows: int, keyspace: int) -> list[pa.Table]:
    """Per file: sorted unique keys, one version per file (ascending), 20% deletes, as level-0 files are."""
    out = []
    for v in range(1, files + 1):
        keys = np.unique(rng.integers(0, keyspace, rows))
        out.append(pa.table({"id": pa.array(keys, pa.int64()), "x": rng.random(len(keys)),
                             "_maintd_op": pa.array((rng.random(len(keys)) < 0.2).astype(np.int8)),
                             "_maintd_version": pa.array(np.full(len(keys), v), pa.int64())}))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_the_version_ordered_merge_equals_the_full_sort(seed: int) -> None:
    rng = np.random.default_rng(seed)
    parts = _random_versions(rng, files=30, rows=50, keyspace=200)
    data = pa.concat_tables(parts)
    expected_cluster = sort_by_key_version(data, ["id"], newest_first=False)
    expected_compact = latest_rows(data, ["id"]).sort_by("id")
    for ordered in (True, False):
        assert merge_chunk(data, ["id"], "cluster", version_ordered=ordered).equals(expected_cluster)
        assert merge_chunk(data, ["id"], "compact", version_ordered=ordered).equals(expected_compact)
    shuffled = pa.concat_tables([parts[i] for i in rng.permutation(len(parts))])
    assert merge_chunk(shuffled, ["id"], "cluster", version_ordered=False).equals(expected_cluster)
    assert merge_chunk(shuffled, ["id"], "compact", version_ordered=False).equals(expected_compact)


def test_the_version_ordered_merge_with_a_composite_key() -> None:
    rng = np.random.default_rng(7)
    grid = [(a, f"k{b}") for a in range(4) for b in range(9)]  # sorted by (a, b)
    parts = []
    for v in range(1, 21):
        chosen = [grid[i] for i in sorted(rng.choice(len(grid), 15, replace=False))]
        parts.append(pa.table({"a": pa.array([c[0] for c in chosen], pa.int64()), "b": [c[1] for c in chosen],
                               "_maintd_op": pa.array((rng.random(15) < 0.3).astype(np.int8)),
                               "_maintd_version": pa.array(np.full(15, v), pa.int64())}))
    data = pa.concat_tables(parts)
    keys = ["a", "b"]
    assert merge_chunk(data, keys, "cluster", version_ordered=True).equals(
        sort_by_key_version(data, keys, newest_first=False))
    assert merge_chunk(data, keys, "compact", version_ordered=True).equals(
        latest_rows(data, keys).sort_by([("a", "ascending"), ("b", "ascending")]))


def test_inputs_are_taken_in_version_order_and_overlaps_are_detected(tmp_path: Path) -> None:
    table, _ = make_table(tmp_path, commits=6, buckets=1)
    files = list(table.snapshot().files.values())
    ordered, disjoint = in_version_order(list(reversed(files)))
    assert [f.min_version for f in ordered] == sorted(f.min_version for f in files) and disjoint
    wide = ordered[0].model_copy(update={"max_version": ordered[2].min_version})
    assert not in_version_order([wide, *ordered[1:]])[1]


def _plan(table: Table, kind: str, paths: list[str], level: int | None = 1) -> PlanDoc:
    snap = table.snapshot()
    f0 = snap.files[paths[0]]
    task = PlanTaskDoc(task_id=f"{kind}-{f0.bucket}-{len(paths)}", kind=kind, partition=dict(f0.partition),  # type: ignore[arg-type]
                       bucket=f0.bucket, target_level=level if kind == "cluster" else None, inputs=tuple(paths))
    return PlanDoc(table_uri=table.uri, read_version=snap.version, tasks=(task,))


@pytest.mark.parametrize("options", [ExecutionOptions(), ExecutionOptions(task_memory_bytes=20_000)],
                         ids=["memory", "stream"])
def test_merging_files_whose_version_ranges_overlap_keeps_the_rule(tmp_path: Path, options: ExecutionOptions) -> None:
    """Odd and even commits clustered apart give two level-1 files with interleaved versions; merging those
    (with newer level-0 files) must still order versions by their value, not by file."""
    table = Table.create(str(tmp_path / "t"), SCHEMA, primary_key="id", buckets=1)
    model, rng = Model(), np.random.default_rng(3)
    for _ in range(10):
        b = batch(rng, 120, 150)
        table.write_changes(b, "op")
        model.apply(b)
    files = sorted(table.snapshot().files.values(), key=lambda f: f.min_version)
    for half in (files[0::2], files[1::2]):
        plan = _plan(table, "cluster", [f.path for f in half])
        assert commit_rewrites(table, plan, execute(plan, table, None, options)).committed
    for _ in range(3):
        b = batch(rng, 120, 150)
        table.write_changes(b, "op")
        model.apply(b)
    snap = table.snapshot()
    l1 = [f for f in snap.files.values() if f.level == 1]
    assert len(l1) == 2 and not in_version_order(l1)[1]  # overlapping ranges
    every = sorted(snap.files)
    plan = _plan(table, "cluster", every, level=2)
    (r,) = execute(plan, table, None, options)
    assert r.ok
    data = _rows(table, r)
    pairs = list(zip(data.column("id").to_pylist(), data.column("_maintd_version").to_pylist(), strict=True))
    assert pairs == sorted(pairs) and len(set(pairs)) == len(pairs) == sum(f.rows for f in snap.files.values())
    commit_rewrites(table, plan, [r])
    assert sorted_read(table).equals(model.table())
    plan = _plan(table, "compact", sorted(table.snapshot().files))
    assert commit_rewrites(table, plan, execute(plan, table, None, options)).committed
    assert sorted_read(table).equals(model.table())


def test_streaming_and_in_memory_clustering_write_the_same_rows(tmp_path: Path) -> None:
    table, _ = make_table(tmp_path, commits=30, rows=300, keyspace=2000, buckets=2)
    for spec in task_specs(plan_all(table, "cluster"), table.snapshot()):
        a = run_task(spec.model_copy(update={"task_memory_bytes": 10**9}))
        b = run_task(spec.model_copy(update={"task_memory_bytes": 20_000}))
        assert a.mode == "memory" and b.mode in ("stream", "spill")
        assert _rows(table, a).equals(_rows(table, b))


# -- the zip-cache freeze of Spark workers ------------------------------------------------------------------------


def _zip(path: Path, names: list[str]) -> str:
    with zipfile.ZipFile(path, "w") as z:
        for n in names:
            z.writestr(n, "X = 1\n")
    return str(path)


def test_freezing_zip_caches_is_a_no_op_outside_a_spark_task(monkeypatch: pytest.MonkeyPatch) -> None:
    original = zipimport.zipimporter.invalidate_caches
    monkeypatch.setattr(zipimport.zipimporter, "invalidate_caches", original)
    spark_mod.freeze_zip_caches()
    assert zipimport.zipimporter.invalidate_caches is original


def test_a_pack_run_outside_spark_never_imports_pyspark() -> None:
    # a pack run in process ends like a Spark task (freezing, memory released) in a child that has not imported
    # pyspark: learning that it is not in a Spark task must not import it (about 0.1-0.2 s of every pack)
    code = ("import sys\n"
            "from maintd.execution.spark import in_spark_task, run_pack_in_worker\n"
            "assert run_pack_in_worker([], freeze=True) == [] and not in_spark_task()\n"
            "print('pyspark' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False", out.stderr


def test_frozen_archives_skip_the_reread_and_new_archives_do_not(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import pyspark

    monkeypatch.setattr(zipimport.zipimporter, "invalidate_caches", zipimport.zipimporter.invalidate_caches)
    monkeypatch.setattr(pyspark.TaskContext, "get", classmethod(lambda cls: object()))
    old = _zip(tmp_path / "old.zip", ["a.py"])
    monkeypatch.setattr(sys, "path_importer_cache", {**sys.path_importer_cache, old: zipimport.zipimporter(old)})
    spark_mod.freeze_zip_caches()
    frozen = getattr(zipimport.zipimporter.invalidate_caches, spark_mod._FROZEN_ATTR)
    assert old in frozen
    spark_mod.freeze_zip_caches()  # idempotent
    assert getattr(zipimport.zipimporter.invalidate_caches, spark_mod._FROZEN_ATTR) is frozen
    new = _zip(tmp_path / "new.zip", ["b.py"])
    imp_old, imp_new = sys.path_importer_cache[old], zipimport.zipimporter(new)
    _zip(tmp_path / "old.zip", ["a.py", "c.py"])
    _zip(tmp_path / "new.zip", ["b.py", "d.py"])
    imp_old.invalidate_caches()
    imp_new.invalidate_caches()
    assert imp_old.find_spec("c") is None  # frozen: the directory was not re-read
    assert imp_new.find_spec("d") is not None  # not frozen: re-read as usual


class _GrowingCluster:
    """A backend whose cluster grows from one core to four while a run goes on; jobs block until released."""

    def __init__(self) -> None:
        import threading

        self.lock = threading.Lock()
        self.release = threading.Event()
        self.n_cores = 1
        self.active = 0
        self.peak: dict[int, int] = {}

    def cores(self) -> int:
        return self.n_cores

    def slots(self) -> int:
        return 2 * self.n_cores

    def run(self, packs: Any) -> list[TaskResult]:
        with self.lock:
            self.active += len(packs)
            self.peak[self.n_cores] = max(self.peak.get(self.n_cores, 0), self.active)
        assert self.release.wait(120), "never released"
        with self.lock:
            self.active -= len(packs)
        return [r for p in packs for r in run_pack(list(p))]

    def cancel(self) -> None:
        self.release.set()

    def describe(self) -> tuple[None, None]:
        return None, None


def test_spark_tasks_in_flight_follow_the_cores_the_cluster_has_now(tmp_path: Path) -> None:
    table, _ = make_table(tmp_path, commits=3, buckets=12)
    specs = _specs(table, "compact")
    backend = _GrowingCluster()
    results: list[TaskResult] = []

    def tick() -> float:
        if backend.n_cores == 1 and backend.active == 2:  # two tasks per core: the cluster grows
            backend.n_cores = 4
        elif backend.n_cores == 4 and backend.active == 8:
            backend.release.set()
        return 0.05

    n = scheduler.run_units(specs, backend, ExecutionOptions(task_input_bytes=1), on_result=results.append,
                            on_tick=tick)
    assert n == len(specs) == 12 and all(r.ok for r in results) and len(results) == 12
    assert backend.peak == {1: 2, 4: 8}


@pytest.mark.parametrize(("level", "codecs_by_column"), [
    # amount holds random doubles, which no codec shrinks: stored uncompressed (output.without_futile_compression)
    (1, {"id": "UNCOMPRESSED", "name": "LZ4", "amount": "UNCOMPRESSED", "tier": "LZ4", "_maintd_op": "UNCOMPRESSED",
         "_maintd_version": "UNCOMPRESSED"}),
    (2, dict.fromkeys(["id", "name", "tier", "_maintd_op", "_maintd_version"], "ZSTD") | {"amount": "UNCOMPRESSED"})])
def test_level2_outputs_are_zstd_while_level0_and_level1_files_are_lz4(tmp_path: Path, level: int,
                                                                          codecs_by_column: dict[str, str]) -> None:
    """Level 1 packs its integer columns (DELTA_BINARY_PACKED, uncompressed) and LZ4s the others that LZ4 shrinks."""
    table, _ = make_table(tmp_path, commits=4, buckets=1)
    inputs = list(table.snapshot().files.values())
    specs = task_specs(plan_all(table, "cluster", level=level), table.snapshot())
    (result,) = run_pack([s.model_dump_json() for s in specs])

    def codecs(path: str) -> dict[str, str]:
        md = pq.ParquetFile(table.storage.full_path(path)).metadata
        return {md.row_group(g).column(c).path_in_schema: md.row_group(g).column(c).compression
                for g in range(md.num_row_groups) for c in range(md.num_columns)}

    def packed(path: str) -> set[str]:
        md = pq.ParquetFile(table.storage.full_path(path)).metadata
        return {md.row_group(0).column(c).path_in_schema for c in range(md.num_columns)
                if "DELTA_BINARY_PACKED" in md.row_group(0).column(c).encodings}

    assert result.ok and len(result.adds) == 1
    assert {c for f in inputs for c in codecs(f.path).values()} == {"LZ4", "UNCOMPRESSED"}
    assert codecs(result.adds[0].path) == codecs_by_column
    assert packed(result.adds[0].path) == ({"id", "_maintd_op", "_maintd_version"} if level == 1 else set())


def test_a_pack_makes_each_units_outputs_durable_before_reporting(tmp_path: Path, monkeypatch: Any) -> None:
    from maintd.storage.local import LocalStorage

    table, model = make_table(tmp_path, commits=5, buckets=3)
    calls: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(LocalStorage, "make_durable", lambda self, p: calls.append(("one", [p])))
    real_many = LocalStorage.make_durable_many
    monkeypatch.setattr(LocalStorage, "make_durable_many",
                        lambda self, ps: (calls.append(("many", list(ps))), real_many(self, ps))[1])
    specs = task_specs(plan_all(table, "compact"), table.snapshot())
    results = run_pack([s.model_dump_json() for s in specs])
    assert len(results) == 3 and all(r.ok for r in results)
    assert calls == [("many", [a.path for a in r.adds]) for r in results], "one sync per unit, none per file"
    calls.clear()
    (single,) = task_specs(plan_all(table, "cluster", level=1), table.snapshot())[:1]
    done = TaskResult.model_validate_json(run_task_json(single.model_dump_json()))
    assert done.ok and calls == [("one", [a.path]) for a in done.adds]  # a unit run alone syncs its own files
    commit_rewrites(table, plan_all(table, "compact"), results)
    assert sorted_read(table).equals(model.table())


def test_a_units_files_are_synced_while_the_next_unit_runs_and_the_pack_reports_after_every_sync(
        tmp_path: Path, monkeypatch: Any) -> None:
    import threading

    from maintd.execution import output
    from maintd.storage.local import LocalStorage

    table, _ = make_table(tmp_path, commits=5, buckets=3)
    started: list[int] = []
    second = threading.Event()
    real_outputs = output.Outputs.__init__

    def outputs(self: Any, *args: Any, **kwargs: Any) -> None:
        started.append(1)
        if len(started) == 2:
            second.set()
        real_outputs(self, *args, **kwargs)

    synced: list[tuple[bool, list[str]]] = []
    real_many = LocalStorage.make_durable_many

    def many(self: Any, paths: Any) -> None:
        overlapped = second.wait(10) if not synced else True  # the first sync outlasts the second unit's start
        real_many(self, paths)
        synced.append((overlapped, list(paths)))

    monkeypatch.setattr(output.Outputs, "__init__", outputs)
    monkeypatch.setattr(LocalStorage, "make_durable_many", many)
    specs = task_specs(plan_all(table, "compact"), table.snapshot())
    results = run_pack([s.model_dump_json() for s in specs])
    assert all(r.ok for r in results) and len(started) == 3
    assert synced == [(True, [a.path for a in r.adds]) for r in results], \
        "the first unit's sync ran while the second unit computed; every sync ended before the pack returned"


def test_a_pack_whose_outputs_cannot_be_made_durable_fails_its_units_and_deletes_their_files(
        tmp_path: Path, monkeypatch: Any) -> None:
    from maintd.storage.local import LocalStorage

    table, _ = make_table(tmp_path, commits=5, buckets=3)
    before = {f.path for f in table.storage.walk()}

    def broken(self: Any, paths: Any) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(LocalStorage, "make_durable_many", broken)
    specs = task_specs(plan_all(table, "compact"), table.snapshot())
    results = run_pack([s.model_dump_json() for s in specs])
    assert [r.ok for r in results] == [False] * 3 and all(r.adds == () for r in results)
    assert all(r.error == "output files could not be made durable: OSError: [Errno 5] Input/output error"
               for r in results)
    assert {f.path for f in table.storage.walk()} == before  # nothing a commit could name is left
