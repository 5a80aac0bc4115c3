"""CPUs a process may use: affinity bounded by the CPU quota of its cgroup (v2 and v1), on fake cgroup trees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from maintd.execution.cpus import cpu_quota, usable_cpus
from maintd.execution.spark import with_task_retries

CPUS = len(os.sched_getaffinity(0))


def v2_tree(tmp: Path, self_path: str, limits: dict[str, str]) -> tuple[Path, Path]:
    """A cgroup v2 mount with ``cpu.max`` files at the given paths, and a /proc/self/cgroup naming ``self_path``."""
    root = tmp / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / self_path.strip("/")).mkdir(parents=True, exist_ok=True)
    for path, value in limits.items():
        (root / path.strip("/") / "cpu.max").write_text(value)
    proc = tmp / "self-cgroup"
    proc.write_text(f"0::{self_path}\n")
    return root, proc


def v1_tree(tmp: Path, self_path: str, quota: str, period: str = "100000", mount: str = "cpu,cpuacct"
            ) -> tuple[Path, Path]:
    root = tmp / "cgroup"
    d = root / mount / self_path.strip("/")
    d.mkdir(parents=True)
    (root / mount / "cpu.cfs_quota_us").write_text("-1\n")
    (root / mount / "cpu.cfs_period_us").write_text("100000\n")
    (d / "cpu.cfs_quota_us").write_text(quota)
    (d / "cpu.cfs_period_us").write_text(period)
    proc = tmp / "self-cgroup"
    proc.write_text(f"12:memory:{self_path}\n4:cpu,cpuacct:{self_path}\n1:name=systemd:{self_path}\n")
    return root, proc


@pytest.mark.parametrize(("cpu_max", "expected"), [
    ("max 100000\n", None), ("150000 100000\n", 1.5), ("50000 100000\n", 0.5), ("100000000 100000\n", 1000.0),
    ("garbage\n", None), ("100000 0\n", None)])
def test_a_v2_cpu_max_is_the_quota(tmp_path: Path, cpu_max: str, expected: float | None) -> None:
    root, proc = v2_tree(tmp_path, "/", {"/": cpu_max})
    assert cpu_quota(root, proc) == expected
    want = CPUS if expected is None else max(1, min(CPUS, -(-int(expected * 10) // 10)))
    assert usable_cpus(root, proc) == want


def test_a_v2_quota_of_an_ancestor_cgroup_bounds_the_process(tmp_path: Path) -> None:
    root, proc = v2_tree(tmp_path, "/kubepods/pod1/ctr", {"/kubepods/pod1": "100000 100000\n",
                                                           "/kubepods/pod1/ctr": "max 100000\n",
                                                           "/kubepods": "800000 100000\n"})
    assert cpu_quota(root, proc) == 1.0
    assert usable_cpus(root, proc) == 1


def test_a_v2_path_not_mounted_falls_back_to_the_mount_root(tmp_path: Path) -> None:
    """Without a cgroup namespace /proc/self/cgroup names the host's path; the container sees its own at /."""
    root, proc = v2_tree(tmp_path, "/", {"/": "100000 100000\n"})
    proc.write_text("0::/system.slice/docker-abc.scope\n")
    assert cpu_quota(root, proc) == 1.0


@pytest.mark.parametrize(("quota", "period", "expected"), [
    ("200000\n", "100000\n", 2.0), ("-1\n", "100000\n", None), ("50000\n", "100000\n", 0.5), ("x\n", "1\n", None)])
def test_a_v1_cfs_quota_over_its_period_is_the_quota(tmp_path: Path, quota: str, period: str,
                                                     expected: float | None) -> None:
    root, proc = v1_tree(tmp_path, "/docker/abc", quota, period)
    assert cpu_quota(root, proc) == expected


def test_a_v1_cpu_controller_mounted_alone_is_found(tmp_path: Path) -> None:
    root, proc = v1_tree(tmp_path, "/", "100000\n", mount="cpu")
    assert cpu_quota(root, proc) == 1.0


def test_no_cgroup_files_is_no_quota(tmp_path: Path) -> None:
    assert cpu_quota(tmp_path / "none", tmp_path / "no-proc") is None
    assert usable_cpus(tmp_path / "none", tmp_path / "no-proc") == CPUS


def test_local_star_runs_as_many_threads_as_the_quota_allows(monkeypatch: pytest.MonkeyPatch) -> None:
    import maintd.execution.spark as spark_module

    monkeypatch.setattr(spark_module, "usable_cpus", lambda: 3)
    assert with_task_retries("local[*]", 4) == "local[3,4]"
    assert with_task_retries("local", 2) == "local[1,2]"
    assert with_task_retries("local[5]", 4) == "local[5,4]", "an explicit count stands"
    assert with_task_retries("spark://h:7077") == "spark://h:7077"
