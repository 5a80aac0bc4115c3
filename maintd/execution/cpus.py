"""The CPUs this process may use: its CPU affinity, bounded by its container's CPU quota.

A Kubernetes pod limited to 2 CPUs on a 64-core node sees 64 cores in ``os.cpu_count()``; the JVM's
``local[*]`` counts them too. maintd sizes ``local[*]`` (:func:`maintd.execution.spark.with_task_retries`)
and its threads by :func:`usable_cpus` instead: the CPUs of ``os.sched_getaffinity`` (a ``cpuset``, ``taskset``),
at most the quota of the process's cgroup and of every cgroup above it, rounded up:

* cgroup v2: ``cpu.max`` (``"200000 100000"`` is 2 CPUs, ``"max 100000"`` no quota).
* cgroup v1: ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us`` (a quota of -1 is none).

The cgroup is the one ``/proc/self/cgroup`` names; under a cgroup namespace (a container) that is ``/``,
the container's own cgroup. A file that cannot be read or parsed counts as no quota.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
SELF_CGROUP = Path("/proc/self/cgroup")


def usable_cpus(root: Path = CGROUP_ROOT, self_cgroup: Path = SELF_CGROUP) -> int:
    """The CPUs this process may run on, within its container's CPU quota (at least 1)."""
    cpus = len(os.sched_getaffinity(0)) or 1
    quota = cpu_quota(root, self_cgroup)
    return max(1, min(cpus, math.ceil(quota))) if quota is not None else cpus


def cpu_quota(root: Path = CGROUP_ROOT, self_cgroup: Path = SELF_CGROUP) -> float | None:
    """The CPU quota of this process's cgroup and its ancestors, in CPUs (the smallest), or None without one."""
    paths = _cgroup_paths(self_cgroup)
    quotas = [q for d in _v2_dirs(root, paths.get("")) if (q := _v2_quota(d / "cpu.max")) is not None]
    for d in _v1_dirs(root, paths):
        q = _v1_quota(d / "cpu.cfs_quota_us", d / "cpu.cfs_period_us")
        if q is not None:
            quotas.append(q)
    return min(quotas, default=None)


def _cgroup_paths(self_cgroup: Path) -> dict[str, str]:
    """Controller list -> cgroup path, from ``/proc/self/cgroup`` (``""`` is the v2 unified hierarchy)."""
    out: dict[str, str] = {}
    try:
        lines = self_cgroup.read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            out[parts[1]] = parts[2]
    return out


def _ancestors(base: Path, path: str | None) -> list[Path]:
    """``base/path`` and every directory above it up to ``base`` (those that exist); ``base`` alone when the
    path is not mounted there (a v1 mount shows the container's own cgroup at its root)."""
    rel = [p for p in (path or "/").split("/") if p]
    dirs = [base.joinpath(*rel[:i]) for i in range(len(rel), -1, -1)]
    found = [d for d in dirs if d.is_dir()]
    return found if found and found[0] == dirs[0] else [base]


def _v2_dirs(root: Path, path: str | None) -> list[Path]:
    if not (root / "cgroup.controllers").exists():
        return []
    return _ancestors(root, path)


def _v1_dirs(root: Path, paths: dict[str, str]) -> list[Path]:
    cpu = next((p for c, p in paths.items() if "cpu" in c.split(",")), None)
    for name in ("cpu,cpuacct", "cpuacct,cpu", "cpu"):
        if (root / name / "cpu.cfs_quota_us").exists():
            return _ancestors(root / name, cpu)
    return []


def _v2_quota(cpu_max: Path) -> float | None:
    try:
        fields = cpu_max.read_text().split()
    except OSError:
        return None
    if len(fields) != 2 or not fields[0].isdigit() or not fields[1].isdigit() or int(fields[1]) <= 0:
        return None  # "max 100000": no quota
    return int(fields[0]) / int(fields[1])


def _v1_quota(quota_file: Path, period_file: Path) -> float | None:
    try:
        quota, period = int(quota_file.read_text().strip()), int(period_file.read_text().strip())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None
