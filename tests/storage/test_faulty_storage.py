"""The fault-injecting storage: rules, seeded randomness, ambiguous results, crashes at named steps."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pytest

from maintd import Table
from maintd.errors import StorageError
from maintd.storage import LocalStorage, storage_for_uri
from maintd.storage.faulty import Fault, FaultPlan, FaultyStorage, InjectedFault


def _storage(tmp_path: Path, *faults: Fault, seed: int = 0) -> tuple[FaultyStorage, FaultPlan]:
    plan = FaultPlan(faults, seed=seed)
    return plan.wrap(LocalStorage(str(tmp_path / "t"))), plan


def test_a_failure_before_applying_changes_nothing(tmp_path: Path) -> None:
    storage, plan = _storage(tmp_path, Fault("fail", op="put_if_absent"))
    with pytest.raises(InjectedFault, match="before it applied") as caught:
        storage.put_if_absent("_log/a.json", b"x")
    assert isinstance(caught.value, OSError) and not caught.value.applied
    assert not (tmp_path / "t" / "_log" / "a.json").exists()
    assert [(f.kind, f.op, f.path) for f in plan.fired] == [("fail", "put_if_absent", "_log/a.json")]


def test_a_failure_after_applying_is_ambiguous_the_operation_happened(tmp_path: Path) -> None:
    seen: list[tuple[str, str, object]] = []
    storage, plan = _storage(tmp_path, Fault("fail_after", op="put_if_absent", path="_log/*.json"))
    plan.observer = lambda op, path, data, result: seen.append((op, path, result))
    with pytest.raises(InjectedFault, match="after it applied"):
        storage.put_if_absent("_log/a.json", b"x")
    assert (tmp_path / "t" / "_log" / "a.json").read_bytes() == b"x"
    assert seen == [("put_if_absent", "_log/a.json", True)], "the observer learns what really happened"
    assert storage.put_if_absent("_log/b.parquet", b"y"), "the path pattern decides which calls a rule matches"


def test_nth_and_times_pick_which_matching_calls_fail(tmp_path: Path) -> None:
    storage, _ = _storage(tmp_path, Fault("fail", op="read", nth=2), Fault("fail", op="exists", times=2))
    storage.write_atomic("a", b"1")
    storage.read("a")
    with pytest.raises(InjectedFault):
        storage.read("a")
    storage.read("a")
    for _ in range(2):
        with pytest.raises(InjectedFault):
            storage.exists("a")
    assert storage.exists("a")


def test_random_faults_follow_the_seed(tmp_path: Path) -> None:
    def outcomes(seed: int) -> list[bool]:
        storage, _ = _storage(tmp_path, Fault("fail", op="*", probability=0.3), seed=seed)
        out = []
        for _ in range(60):
            try:
                storage.exists("x")
                out.append(True)
            except InjectedFault:
                out.append(False)
        return out

    assert outcomes(7) == outcomes(7)
    assert outcomes(7) != outcomes(8)
    assert 5 < outcomes(7).count(False) < 35


def test_a_delay_stalls_the_operation(tmp_path: Path) -> None:
    storage, _ = _storage(tmp_path, Fault("delay", op="exists", seconds=0.2))
    started = time.monotonic()
    storage.exists("x")
    assert time.monotonic() - started >= 0.2


def test_data_files_written_through_the_pyarrow_filesystem_are_covered(tmp_path: Path) -> None:
    Table.create(str(tmp_path / "t"), "id:int64!,name:string", primary_key="id", buckets=1)
    storage, plan = _storage(tmp_path, Fault("fail", op="open_output", path="bucket-*"))
    # a writer's data-file error reaches its caller as a (redacted) StorageError quoting the storage's error
    with pytest.raises(StorageError, match="injected failure of open_output bucket-00000/delta-L0-"):
        Table(storage).upsert(pa.table({"id": [1], "name": ["a"]}))
    plan.clear()
    assert Table(storage).upsert(pa.table({"id": [1], "name": ["a"]})) == 1
    assert Table(storage).read().num_rows == 1


def test_installed_faults_wrap_every_storage_built_for_the_scheme_until_uninstalled(tmp_path: Path) -> None:
    plan = FaultPlan([Fault("fail", op="exists", path="_log/*")])
    plan.install()
    try:
        wrapped = storage_for_uri(str(tmp_path / "t"))
        assert isinstance(wrapped, FaultyStorage) and isinstance(wrapped.inner, LocalStorage)
        with pytest.raises(InjectedFault):
            wrapped.exists("_log/x")
    finally:
        plan.uninstall()
    assert type(storage_for_uri(str(tmp_path / "t"))) is LocalStorage


def test_rules_travel_as_json_to_another_process(tmp_path: Path) -> None:
    plan = FaultPlan([Fault("fail_after", op="put_if_absent", path="_log/*.json", nth=3), Fault("delay", seconds=0.01,
                                                                                             probability=0.5)], seed=5)
    again = FaultPlan.from_json(plan.to_json())
    assert again.faults == plan.faults and again.seed == 5


@pytest.mark.parametrize(("kind", "exists"), [("crash", False), ("crash_after", True)])
def test_a_crash_rule_kills_the_process_at_the_named_step(tmp_path: Path, kind: str, exists: bool) -> None:
    """SIGKILL right before / right after the first commit file is published: nothing after it runs."""
    Table.create(str(tmp_path / "t"), "id:int64!,name:string", primary_key="id", buckets=1)
    script = textwrap.dedent(f"""
        import pyarrow as pa
        from maintd import Table
        from maintd.storage.faulty import Fault, FaultPlan
        FaultPlan([Fault({kind!r}, op="put_if_absent", path="_log/*.json")]).install()
        Table.open({str(tmp_path / "t")!r}).upsert(pa.table({{"id": [1], "name": ["a"]}}))
        print("survived")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == -9 and "survived" not in done.stdout, done.stderr
    assert Table.open(str(tmp_path / "t")).version == (1 if exists else 0)
