"""The per-task rewrite (pyarrow, no Spark): clustering and compaction against a model, both memory modes."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from maintd.execution import ExecutionOptions, commit_rewrites, execute, run_task, task_specs
from maintd.table.files.datafiles import read_data_file
from maintd.table.files.merge import latest_rows
from maintd.table.read.reader import read_snapshot

from .helpers import make_table, plan_all, sorted_read

IN_MEMORY = ExecutionOptions()
STREAMING = ExecutionOptions(task_memory_bytes=30_000)


def _all_versions(table, snap) -> pa.Table:  # type: ignore[no-untyped-def]
    md = snap.metadata
    parts = [read_data_file(table.storage, md, f) for f in snap.files.values()]
    return pa.concat_tables(parts, promote_options="default").select(
        ["id", "name", "amount", "_maintd_op", "_maintd_version"]).sort_by(
        [("id", "ascending"), ("_maintd_version", "ascending")])


@pytest.mark.parametrize("options", [IN_MEMORY, STREAMING], ids=["memory", "stream"])
def test_clustering_keeps_every_row_version_sorted_by_key_then_version(tmp_path: Path, options) -> None:  # type: ignore[no-untyped-def]
    table, _ = make_table(tmp_path)
    snap = table.snapshot()
    expected = _all_versions(table, snap)
    plan = plan_all(table, "cluster", snap, level=1)
    results = execute(plan, table, None, options)
    assert all(r.ok for r in results)
    assert {r.mode for r in results} <= ({"memory"} if options is IN_MEMORY else {"stream", "spill"})
    for r in results:
        [add] = r.adds
        assert add.kind == "delta" and add.level == 1 and not add.data_change
        data = pq.read_table(table.storage.full_path(add.path))
        assert data.column_names == ["id", "name", "amount", "tier", "_maintd_op", "_maintd_version"]
        keys = list(zip(data.column("id").to_pylist(), data.column("_maintd_version").to_pylist(), strict=True))
        assert keys == sorted(keys)
        assert add.key_min == (keys[0][0],) and add.key_max == (keys[-1][0],)
    commit_rewrites(table, plan, results)
    after = _all_versions(table, table.snapshot())
    assert after.equals(expected.cast(after.schema))


@pytest.mark.parametrize("options", [IN_MEMORY, STREAMING], ids=["memory", "stream"])
def test_compaction_keeps_the_latest_row_per_key_and_drops_deletes(tmp_path: Path, options) -> None:  # type: ignore[no-untyped-def]
    table, model = make_table(tmp_path)
    snap = table.snapshot()
    plan = plan_all(table, "compact", snap)
    results = execute(plan, table, None, options)
    assert all(r.ok for r in results)
    for r in results:
        [add] = r.adds
        assert add.kind == "base" and add.level is None and add.delete_rows == 0
        assert add.min_version == min(snap.files[p].min_version for p in r.inputs)
        assert add.max_version == max(snap.files[p].max_version for p in r.inputs)
        data = pq.read_table(table.storage.full_path(add.path))
        assert "_maintd_op" not in data.column_names
    commit_rewrites(table, plan, results)
    assert all(f.kind == "base" for f in table.snapshot().files.values())
    assert sorted_read(table).equals(model.table())
    with_versions = read_snapshot(table.storage, table.snapshot(), keep_hidden=True).sort_by("id")
    expected = latest_rows(_all_versions(table, snap), ["id"]).sort_by("id")
    assert with_versions.column("_maintd_version").equals(expected.column("_maintd_version"))


def test_streaming_and_in_memory_compaction_write_the_same_rows(tmp_path: Path) -> None:
    table, _ = make_table(tmp_path, commits=30, rows=300, keyspace=2000, buckets=2)
    specs = task_specs(plan_all(table, "compact"), table.snapshot())
    for spec in specs:
        a = run_task(spec.model_copy(update={"task_memory_bytes": 10**9}))
        b = run_task(spec.model_copy(update={"task_memory_bytes": 20_000}))
        assert a.mode == "memory" and b.mode in ("stream", "spill")
        ta = pq.read_table(table.storage.full_path(a.adds[0].path))
        tb = pq.read_table(table.storage.full_path(b.adds[0].path))
        assert ta.equals(tb)


def test_compaction_of_a_bucket_whose_rows_are_all_deleted_writes_no_file(tmp_path: Path) -> None:
    table, _ = make_table(tmp_path, commits=1, rows=5, keyspace=5, buckets=1)
    keys = table.read().column("id")
    table.delete(pa.table({"id": keys}))
    plan = plan_all(table, "compact")
    results = execute(plan, table, None)
    assert results[0].ok and results[0].adds == ()
    commit_rewrites(table, plan, results)
    assert not table.snapshot().files and table.read().num_rows == 0


def test_a_task_failing_midway_deletes_its_partial_output_and_commits_nothing(tmp_path: Path) -> None:
    table, model = make_table(tmp_path)
    snap = table.snapshot()
    plan = plan_all(table, "compact", snap)
    victim = plan.tasks[0].task_id
    results = execute(plan, table, None, ExecutionOptions(faults={victim: "after_first_chunk"}))
    failed = [r for r in results if not r.ok]
    assert [r.task_id for r in failed] == [victim] and "injected fault" in (failed[0].error or "")
    outcome = commit_rewrites(table, plan, results)
    assert outcome.failed == [victim] and victim not in outcome.committed
    after = table.snapshot()
    assert set(plan.tasks[0].inputs) <= set(after.files)  # the failed bucket is as it was
    written = {f.path for f in table.storage.walk() if f.path.startswith("bucket-")}
    assert written == set(after.files) | (set(snap.files) - set(after.files))  # no stray output
    assert sorted_read(table).equals(model.table())


def test_inputs_that_decode_to_far_more_than_their_footers_say_are_streamed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Long repeated strings, dictionary-encoded: a few KB of Parquet, megabytes of Arrow when read as plain
    strings (files that do not list the column as a dictionary: an older maintd's, another writer's). The
    memory path measures what it decodes and gives way to streaming past the budget. The same files read
    with their dictionaries stay a few KB, in memory."""
    from maintd import Table
    from maintd.execution import rewrite

    table = Table.create(str(tmp_path / "t"), "id:int64!,note:string", primary_key="id", buckets=1)
    for i in range(4):
        ids = pa.array(range(i * 500, i * 500 + 1500), pa.int64())
        table.upsert(pa.table({"id": ids, "note": [("abc" * 700)[: 2000 - i] for _ in range(1500)]}))
    [spec] = task_specs(plan_all(table, "compact"), table.snapshot())
    packed = sum(f.bytes for f in spec.inputs)
    budget = 4 << 20
    assert packed * 6 < budget, "the first, compressed-size test must let the memory path try"
    as_dictionary = run_task(spec.model_copy(update={"task_memory_bytes": budget}))
    monkeypatch.setattr(rewrite, "unit_dictionaries", lambda *_: frozenset())
    small = run_task(spec.model_copy(update={"task_memory_bytes": budget}))
    large = run_task(spec.model_copy(update={"task_memory_bytes": 1 << 30}))
    assert small.ok and large.ok and small.mode in ("stream", "spill") and large.mode == "memory"
    assert as_dictionary.ok and as_dictionary.mode == "memory"
    read = [pq.read_table(table.storage.full_path(r.adds[0].path)) for r in (small, large, as_dictionary)]
    assert read[0].equals(read[1]) and read[0].equals(read[2]) and read[0].num_rows == 3000


@pytest.mark.parametrize("memory", [10**9, 20_000], ids=["memory", "stream"])
def test_a_task_whose_input_file_is_missing_fails_naming_the_file_and_writes_nothing(tmp_path: Path,
                                                                                     memory: int) -> None:
    table, _ = make_table(tmp_path, commits=6, buckets=1)
    [spec] = task_specs(plan_all(table, "compact"), table.snapshot())
    gone = spec.inputs[2].path
    table.storage.delete(gone)
    before = {f.path for f in table.storage.walk()}

    result = run_task(spec.model_copy(update={"task_memory_bytes": memory}))

    assert not result.ok and not result.adds
    assert (result.error or "").startswith("DataFileMissingError") and gone in (result.error or "")
    assert {f.path for f in table.storage.walk()} == before


@pytest.mark.parametrize("kind", ["cluster", "compact"])
def test_a_delta_output_keeps_statistics_of_its_key_and_hidden_columns_only(tmp_path: Path, kind: str) -> None:
    """A DeltaFile's other columns cannot prune it (a newer version elsewhere may hide a matching row), so
    their statistics are not written; a BaseFile keeps every column's."""
    table, model = make_table(tmp_path, commits=6)
    plan = plan_all(table, kind)
    results = execute(plan, table, None, ExecutionOptions())
    assert commit_rewrites(table, plan, results).version is not None
    outputs = [a for r in results for a in r.adds]
    assert outputs and all(a.kind == ("delta" if kind == "cluster" else "base") for a in outputs)
    for a in outputs:
        meta = pq.ParquetFile(str(tmp_path / "t" / a.path)).metadata
        group = meta.row_group(0)
        with_stats = {group.column(i).path_in_schema for i in range(group.num_columns)
                      if group.column(i).is_stats_set}
        codecs = {group.column(i).compression for i in range(group.num_columns)}
        if kind == "cluster":
            assert with_stats == {"id", "_maintd_op", "_maintd_version"}
            assert codecs == {"LZ4", "UNCOMPRESSED"}, "level 1 is rewritten soon: the time to write and read it counts"
        else:
            assert with_stats == {"id", "name", "amount", "tier", "_maintd_version"}
            assert codecs == {"ZSTD"}
    assert sorted_read(table).equals(model.table())


def test_output_options_by_kind_and_level() -> None:
    from maintd.execution.output import OUTPUT_OPTIONS, output_options

    schema = pa.schema([("p", pa.string()), ("id", pa.int64()), ("v", pa.string()), ("_maintd_op", pa.int8()),
                        ("_maintd_version", pa.int64())])
    l1 = output_options(schema, "delta", 1, ["p", "id"])
    l2 = output_options(schema, "delta", 2, ["p", "id"])
    assert l1["compression"] == {"p": "lz4", "id": "none", "v": "lz4", "_maintd_op": "none", "_maintd_version": "none"}
    assert l1["column_encoding"] == dict.fromkeys(["id", "_maintd_op", "_maintd_version"], "DELTA_BINARY_PACKED")
    assert "compression_level" not in l1 and l1["use_dictionary"] == ["p", "v"]
    partition_int = pa.schema([("p", pa.int32()), *((f.name, f.type) for f in schema if f.name != "p")])
    constant = output_options(partition_int, "delta", 1, ["p", "id"], ["p"])
    assert "p" not in constant["column_encoding"] and constant["use_dictionary"] == ["v", "p"], \
        "a constant column is a dictionary of one value at any level"
    assert "use_dictionary" not in l2 and "use_dictionary" not in OUTPUT_OPTIONS  # every column may take one
    assert l2["compression"] == "zstd" and l2["compression_level"] == 1
    assert l1["write_statistics"] == l2["write_statistics"] == ["p", "id", "_maintd_op", "_maintd_version"]
    assert output_options(schema, "base", None, ["p", "id"]) == OUTPUT_OPTIONS
    assert OUTPUT_OPTIONS["write_statistics"] is True


def test_the_attempt_is_zero_outside_spark_without_importing_pyspark() -> None:
    import subprocess
    import sys

    code = ("import sys; from maintd.execution.rewrite import current_attempt; "
            "print(current_attempt(), 'pyspark' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0", "False"], "a process running units itself has no Spark task and needs no pyspark"


def test_fetching_inputs_refuses_a_link_out_of_the_table_and_reads_a_local_disk_on_one_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from maintd.errors import PathOutsideTableError
    from maintd.execution import inputs
    from maintd.storage import LocalStorage

    table, _ = make_table(tmp_path, commits=3, buckets=1)
    files = sorted(table.snapshot().files.values(), key=lambda f: f.path)
    threads_asked: list[int] = []
    real = inputs.map_in_runs
    monkeypatch.setattr(inputs, "map_in_runs", lambda fn, items, n: (threads_asked.append(n), real(fn, items, n))[1])
    opened = inputs.fetch_all(table.storage, files, 4)
    assert [pf.metadata.num_rows for pf in opened] == [f.rows for f in files]
    assert threads_asked == [1] and not LocalStorage.parallel_reads, "a page-cache copy gains nothing from threads"
    # a data file replaced by a link to a file outside the table is refused, not read
    outside = tmp_path / "outside.parquet"
    target = tmp_path / "t" / files[0].path
    outside.write_bytes(target.read_bytes())
    target.unlink()
    target.symlink_to(outside)
    with pytest.raises(PathOutsideTableError, match="outside the table root"):
        inputs.fetch_all(table.storage, files, 4)
