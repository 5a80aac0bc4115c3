"""Merges of text columns of few values: read as dictionaries where every input lists them, written as such."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from maintd.execution import ExecutionOptions, commit_rewrites, execute, task_specs
from maintd.execution import inputs as inputs_module
from maintd.execution.rewrite import run_task
from maintd.table.files.dictionaries import dictionary_columns

from .helpers import Model, batch, make_table, plan_all, sorted_read

# in threads of this process: the tests spy on the units' Layout (a worker process would not see the spy)
IN_MEMORY = ExecutionOptions(in_process_workers="threads")
STREAMING = ExecutionOptions(task_memory_bytes=60_000, in_process_workers="threads")


def _listed(table: Any, path: str) -> frozenset[str]:
    return dictionary_columns(pq.read_metadata(table.storage.full_path(path)))


def _spy_dictionaries(monkeypatch: pytest.MonkeyPatch) -> list[frozenset[str]]:
    """The columns each unit reads as dictionaries (both ways of reading: whole files and streams)."""
    seen: list[frozenset[str]] = []
    real = inputs_module.Layout.__init__

    def init(self: Any, metadata: Any, dictionaries: Any = ()) -> None:
        real(self, metadata, dictionaries)
        seen.append(self.dictionaries)

    monkeypatch.setattr(inputs_module.Layout, "__init__", init)
    return seen


@pytest.mark.parametrize("options", [IN_MEMORY, STREAMING], ids=["memory", "stream"])
@pytest.mark.parametrize("kind", ["cluster", "compact"])
def test_a_unit_whose_inputs_list_a_column_merges_it_as_a_dictionary_and_lists_it_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: ExecutionOptions, kind: str) -> None:
    table, model = make_table(tmp_path, commits=8, buckets=2)
    assert all(_listed(table, p) == {"tier"} for p in table.snapshot().files), "a writer's files list tier only"
    seen = _spy_dictionaries(monkeypatch)
    plan = plan_all(table, kind)
    results = execute(plan, table, None, options)
    assert all(r.ok for r in results)
    if options is STREAMING:
        assert {r.mode for r in results} <= {"stream", "spill"}
    assert frozenset({"tier"}) in seen and all(d <= {"tier"} for d in seen)
    assert commit_rewrites(table, plan, results).committed
    outputs = [a for r in results for a in r.adds]
    assert outputs and all(_listed(table, a.path) == {"tier"} for a in outputs)
    for a in outputs:
        assert pq.ParquetFile(table.storage.full_path(a.path)).schema_arrow.field("tier").type == pa.string()
    assert sorted_read(table).equals(model.table())


def test_an_input_that_does_not_list_the_column_makes_the_unit_read_it_plain_and_its_output_lists_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file of an older maintd (no footer list) among new ones: the unit reads the column as plain strings, and
    its output, encoding them itself, lists it: the next merge reads a dictionary again."""
    import maintd.table.files.writer as writer

    table, model = make_table(tmp_path, commits=4, buckets=1)
    with monkeypatch.context() as m:  # a writer that stores no dictionary
        m.setattr(writer, "encode_batch", lambda t, columns: t)
        m.setattr(writer, "dictionary_types", lambda *a: [])
        import maintd.table.files.datafiles as files

        real = files.write_parquet
        m.setattr(files, "write_parquet", lambda data, sink, options, text=(), *a: real(data, sink, options, (), *a))
        b = batch(np.random.default_rng(9), 200, 600)
        table.write_changes(b, "op")
        model.apply(b)
    listed = [_listed(table, p) for p in table.snapshot().files]
    assert sorted(listed, key=len) == [frozenset(), *[frozenset({"tier"})] * 4]
    seen = _spy_dictionaries(monkeypatch)
    plan = plan_all(table, "cluster")
    results = execute(plan, table, None, IN_MEMORY)
    assert all(r.ok for r in results) and commit_rewrites(table, plan, results).committed
    assert frozenset() in seen and frozenset({"tier"}) not in seen
    [out] = [a for r in results for a in r.adds]
    assert _listed(table, out.path) == {"tier"}
    assert sorted_read(table).equals(model.table())


def test_an_output_whose_dictionary_outgrows_a_page_part_way_writes_plain_values_and_does_not_list_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every input's dictionary fits; their union in a later row group does not. The file's writer is set up for a
    dictionary by its first row group (rows of the lowest keys: two values); the later one falls back to plain
    pages, and the footer does not list the column, so no reader takes it for a dictionary throughout."""
    from maintd import Table

    monkeypatch.setattr("maintd.execution.rewrite._row_group_rows", lambda spec: 1000)

    table = Table.create(str(tmp_path / "t"), "id:int64!,c:string", primary_key="id", buckets=1)
    rng = np.random.default_rng(1)
    expected: dict[int, str] = {}
    for commit in range(40):
        if commit < 10:  # the lowest keys, two values
            keys, pool = np.arange(commit * 200, commit * 200 + 200), ["a", "b"]
        else:  # interleaved keys, 40 values of 204 bytes per file (8 KB): any 1,024 rows hold 100 KB of them
            keys = 2000 + (commit - 10) + 30 * np.arange(200)
            pool = [f"{commit:03d}-{i:0200d}" for i in range(40)]
        values = [pool[i] for i in rng.integers(0, len(pool), 200)]
        table.upsert(pa.table({"id": pa.array(keys, pa.int64()), "c": values}))
        expected.update(zip(keys.tolist(), values, strict=True))
    assert all(_listed(table, p) == {"c"} for p in table.snapshot().files)
    [spec] = task_specs(plan_all(table, "compact"), table.snapshot())
    result = run_task(spec.model_copy(update={"task_memory_bytes": 4 << 20, "target_file_bytes": 1 << 30}))
    assert result.ok and len(result.adds) == 1, result.error
    path = table.storage.full_path(result.adds[0].path)
    md = pq.read_metadata(path)
    assert md.num_row_groups >= 2, "the test needs a later row group"
    assert md.row_group(0).column(1).has_dictionary_page, "the first row group's dictionary fits"
    assert _listed(table, result.adds[0].path) == frozenset()
    got = pq.read_table(path)
    assert dict(zip(got.column("id").to_pylist(), got.column("c").to_pylist(), strict=True)) == expected


def test_the_model_check_of_a_whole_table_with_dictionaries(tmp_path: Path) -> None:
    """Cluster, compact, write again, compact: the reads equal the model at every step, every output lists tier."""
    table, model = make_table(tmp_path, commits=10, buckets=3)
    rng = np.random.default_rng(5)
    for kind in ("cluster", "compact", None, "compact"):
        if kind is None:
            for _ in range(4):
                b = batch(rng, 150, 600)
                table.write_changes(b, "op")
                model.apply(b)
            continue
        plan = plan_all(table, kind)
        results = execute(plan, table, None, IN_MEMORY)
        assert all(r.ok for r in results) and commit_rewrites(table, plan, results).committed
        assert all(_listed(table, a.path) == {"tier"} for r in results for a in r.adds)
        assert sorted_read(table).equals(model.table())
    assert Model  # the model above is the helpers' one


def test_inputs_are_opened_once_with_the_dictionaries_the_first_lists_and_again_only_when_the_unit_differs(
        tmp_path: Path) -> None:
    from maintd.execution.inputs import dictionary_candidates, fetch_all, unit_dictionaries

    table, _ = make_table(tmp_path, commits=5, buckets=1)
    files = sorted(table.snapshot().files.values(), key=lambda f: f.min_version)
    fetched = fetch_all(table.storage, files, 4, dictionary_candidates(table.metadata))
    chosen = unit_dictionaries(table.metadata, (f.metadata for f in fetched))
    assert chosen == {"tier"}
    assert all(f.reader(chosen) is f.reader() for f in fetched[1:]), "opened with tier as a dictionary already"
    assert fetched[0].reader(chosen) is not fetched[0].reader(), "the first was opened before anything was known"
    plain = fetched[1].reader(frozenset())
    assert plain is not fetched[1].reader() and pa.types.is_string(plain.read_all().schema.field("tier").type)
    assert pa.types.is_dictionary(fetched[1].reader(chosen).read_all().schema.field("tier").type)


def test_an_input_whose_columns_lie_elsewhere_still_reads_its_dictionaries_by_name(tmp_path: Path) -> None:
    """Inputs after the first are opened with the first one's column positions of the dictionaries; a file whose
    columns lie otherwise (another writer's order) is opened again by name, from the footer already parsed."""
    import json

    from maintd.execution.inputs import dictionary_candidates, fetch_all
    from maintd.table.files.dictionaries import DICTIONARY_KEY

    table, _ = make_table(tmp_path, commits=2, buckets=1)
    first, second = sorted(table.snapshot().files.values(), key=lambda f: f.min_version)
    path = table.storage.full_path(second.path)
    t = pq.read_table(path)
    names = t.column_names
    moved = [names[-1], *reversed(names[:-1])]  # tier elsewhere
    assert moved.index("tier") != names.index("tier")
    t = t.select(moved).replace_schema_metadata({DICTIONARY_KEY: json.dumps(["tier"])})
    pq.write_table(t, path, use_dictionary=["tier"])
    fetched = fetch_all(table.storage, [first, second], 1, dictionary_candidates(table.metadata))
    assert [sorted(f.reader().read_all().column_names) for f in fetched] == [sorted(names)] * 2
    read = fetched[1].reader().read_all()
    assert pa.types.is_dictionary(read.schema.field("tier").type)
    assert read.column("tier").to_pylist() == t.column("tier").to_pylist()
    for f in fetched[1:]:  # no other column was taken for a dictionary
        assert [c for c in f.reader().read_all().column_names
                if pa.types.is_dictionary(f.reader().read_all().schema.field(c).type)] == ["tier"]
