"""Learning a write pattern and a size model from a real table's log and files."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.acero  # imported before freezegun swaps datetime.date, which its C module checks on import
import pytest
from freezegun import freeze_time

from maintd.errors import InvalidInputError
from maintd.execution import commit_rewrites, execute
from maintd.planner import default_policy, plan, with_overrides
from maintd.simulate import learn, learn_pattern
from maintd.simulate.keys import measure_overheads, sample_key_overlap
from maintd.simulate.sizes import overlap_from_merges
from maintd.table import Table

T0 = datetime(2024, 5, 1, tzinfo=UTC)
COMPACT_NOW = with_overrides(default_policy(), {"compaction": {"max_delta_files": 1, "min_interval_hours": 0}})


def _rows(ids: range) -> pa.Table:
    return pa.table({"id": list(ids), "v": [f"v{i}" for i in ids]})


def _three_overlapping_writes(uri: str) -> Table:
    """Commits at 10-minute steps: ids 0-99, 50-149, 100-199 (a third of the upserts replace a live key)."""
    with freeze_time(T0) as clock:
        t = Table.create(uri, "id:int64!,v:string", primary_key="id", buckets=2)
        for lo in (0, 50, 100):
            clock.tick(timedelta(minutes=10))
            t.upsert(_rows(range(lo, lo + 100)))
    return t


def _maintain(t: Table, at: datetime, policy: object = COMPACT_NOW) -> None:
    with freeze_time(at):
        p = plan(t.snapshot(), policy, at, t.uri)  # type: ignore[arg-type]
        assert p.tasks
        commit_rewrites(t, p, execute(p, t, None))


def test_the_pattern_holds_every_writer_commit_per_bucket_and_leaves_maintenance_out(tmp_path: Path) -> None:
    t = _three_overlapping_writes(str(tmp_path / "t"))
    _maintain(t, T0 + timedelta(minutes=35))
    p = learn_pattern(t)
    assert [c.version for c in p.commits] == [1, 2, 3]
    assert [c.time_ms for c in p.commits] == [int((T0 + timedelta(minutes=m)).timestamp() * 1000) for m in (10, 20, 30)]
    adds = {a.path: a for v in (1, 2, 3) for a in t.log.read_commit(v) or [] if hasattr(a, "rows")}
    assert sum(w.rows for c in p.commits for w in c.writes) == sum(a.rows for a in adds.values()) == 300
    assert sum(c.bytes for c in p.commits) == sum(a.bytes for a in adds.values())
    assert {w.bucket for c in p.commits for w in c.writes} == {0, 1}
    assert len(p.merges) == 2 and all(m.kind == "compact" for m in p.merges)  # one compaction per bucket
    assert p.period_ms == 30 * 60_000  # 20 minutes of writes plus one typical 10-minute gap
    rates = {r.bucket: r for r in p.bucket_rates()}
    assert rates[0].commits_per_hour == pytest.approx(6.0) and rates[0].delete_share == 0


def test_key_overlap_is_learned_from_the_compactions_in_the_log(tmp_path: Path) -> None:
    t = _three_overlapping_writes(str(tmp_path / "t"))
    _maintain(t, T0 + timedelta(minutes=35))
    table_wide, per_bucket = overlap_from_merges(learn_pattern(t).merges)
    assert table_wide == pytest.approx(1 / 3)  # 300 upserts became 200 live keys
    assert set(per_bucket) and all(0 <= o <= 1 for o in per_bucket.values())
    learned = learn(t)
    assert learned.sizes.sources["key_overlap"] == "log"
    assert learned.sizes.key_overlap == pytest.approx(1 / 3)


def test_key_overlap_is_sampled_from_the_files_of_a_table_never_compacted(tmp_path: Path) -> None:
    t = _three_overlapping_writes(str(tmp_path / "t"))
    assert sample_key_overlap(t, t.snapshot()) == pytest.approx(1 / 3)
    learned = learn(t)
    assert learned.sizes.sources["key_overlap"] == "sample"
    assert learned.sizes.key_overlap == pytest.approx(1 / 3)


def test_deletes_are_counted_apart_and_a_compaction_estimate_drops_them(tmp_path: Path) -> None:
    t = _three_overlapping_writes(str(tmp_path / "t"))
    with freeze_time(T0 + timedelta(minutes=40)):
        t.delete(pa.table({"id": list(range(0, 40))}))
    p = learn_pattern(t)
    assert sum(w.delete_rows for c in p.commits for w in c.writes) == 40
    assert p.totals()["delete_share"] == pytest.approx(40 / 340)
    sizes = learn(t).sizes
    assert sizes.compact_rows(list(t.snapshot().files.values())) == 160  # 200 live keys, 40 deleted


def test_the_overhead_of_each_file_layout_is_read_from_a_footer(tmp_path: Path) -> None:
    t = _three_overlapping_writes(str(tmp_path / "t"))
    _maintain(t, T0 + timedelta(minutes=35))
    files = list(t.snapshot().files.values())
    over = measure_overheads(t, files)
    assert set(over) == {"base"} and 200 < over["base"] < min(f.bytes for f in files)


def test_the_learning_window_keeps_only_the_newest_hours_of_writes(tmp_path: Path) -> None:
    with freeze_time(T0) as clock:
        t = Table.create(str(tmp_path / "t"), "id:int64!,v:string", primary_key="id", buckets=1)
        for i in range(10):
            clock.tick(timedelta(hours=1))
            t.upsert(_rows(range(i * 10, i * 10 + 10)))
    assert len(learn_pattern(t, hours=2.5).commits) == 3
    assert len(learn_pattern(t, hours=None).commits) == 10
    assert [c.version for c in learn_pattern(t, hours=None, until_version=4).commits] == [1, 2, 3, 4]


def test_an_overwrite_is_learned_as_replacing_the_buckets_it_rewrote(tmp_path: Path) -> None:
    t = _three_overlapping_writes(str(tmp_path / "t"))
    with freeze_time(T0 + timedelta(minutes=40)):
        t.overwrite(_rows(range(0, 10)))
    last = learn_pattern(t).commits[-1]
    assert {b for _, b in last.replaces} == {0, 1} and sum(w.rows for w in last.writes) == 10


def test_a_table_without_writes_has_no_pattern_to_learn(tmp_path: Path) -> None:
    t = Table.create(str(tmp_path / "empty"), "id:int64!,v:string", primary_key="id", buckets=2)
    with pytest.raises(InvalidInputError, match="has no writes in its retained history"):
        learn_pattern(t)


def test_a_layout_never_read_takes_the_overhead_of_its_nearest_layout(tmp_path: Path) -> None:
    from maintd.simulate.sizes import learn_sizes

    t = _three_overlapping_writes(str(tmp_path / "t"))
    pattern = learn_pattern(t)
    files = list(t.snapshot().files.values())
    # BaseFiles never seen: maintenance's merged DeltaFiles stand in (a version column and a key index in the
    # footer, as BaseFiles have), not the writer's small level-0 footer
    assert learn_sizes(pattern, files, overheads={"L0": 500, "merged": 1100}).overhead == {
        "L0": 500, "merged": 1100, "base": 1100}
    assert learn_sizes(pattern, files, overheads={"base": 1300}).overhead == {"L0": 1300, "merged": 1300, "base": 1300}
    assert learn_sizes(pattern, files, overheads={"L0": 500}).overhead == {"L0": 500, "merged": 500, "base": 500}
    assert learn_sizes(pattern, files, overheads={"L0": 500, "base": 1300}).overhead == {
        "L0": 500, "merged": 1300, "base": 1300}
    assert learn_sizes(pattern, files).overhead == {"L0": 0, "merged": 0, "base": 0}


def test_prior_rows_bytes_are_estimated_from_what_a_compaction_folds_and_none_without_a_basefile() -> None:
    from maintd.simulate.sizes import Line, SizeModel
    from maintd.table.log.actions import AddFile

    def f(kind: str, rows: int, nbytes: int, deletes: int = 0) -> AddFile:
        return AddFile.model_construct(path=f"{kind}-{rows}.parquet", partition={}, bucket=0, kind=kind,
                                       level=None if kind == "base" else 0, rows=rows, bytes=nbytes,
                                       delete_rows=deletes)

    model = SizeModel(overhead={"L0": 1000, "merged": 2000, "base": 3000}, upsert_row_bytes=20.0,
                      delete_row_bytes=8.0, merge={}, base=Line(3000, 10.0), key_overlap=0.5)
    base, deltas = f("base", 10_000, 103_000), [f("delta", 100, 3000, deletes=10), f("delta", 50, 2000)]
    # payload 2000 + 1000; base rows of (140 upserts x 0.5 overlap + 10 deletes) x 10 B
    assert model.prior_driver([base, *deltas]) == pytest.approx(3000 + 10.0 * (140 * 0.5 + 10))
    assert model.prior_bytes([base, *deltas]) == 2000 + 3000 + 800  # not observed: merged overhead + driver
    assert model.prior_bytes(deltas) == 0, "a first compaction (no BaseFile) writes no prior-rows file"
    learned = SizeModel(**{**model.__dict__, "prior": Line(500, 2.0)})
    assert learned.prior_bytes([base, *deltas]) == 500 + 2 * 3800
    # a clustering that looks up (changes.prior.rows=lookup) in a bucket with BaseFiles stores the same
    assert learned.prior_bytes(deltas, has_base=True) == learned.prior_bytes([base, *deltas])
    assert learned.prior_bytes(deltas, has_base=False) == 0
