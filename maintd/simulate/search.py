"""The search behind ``maintd tune``: which knobs to try, in what order, and how candidates compare.

A candidate is a set of knob values over the current policy plus a maintenance interval. Candidates compare by
one key: those that meet every target come first, the others by how far they miss (the sum of the relative gaps
of the targets they miss); then by bytes rewritten (the cost: fewer is cheaper), then by runs. The search is a
coordinate search: knob after knob, each value of the knob's grid is tried with the others held, the best kept;
passes repeat until one improves nothing. It is deterministic: fixed grids, a fixed order, ties broken by the
key and then by the order tried. An invalid combination (a trigger no run can reach, a minimum above a maximum)
is never simulated: the policy models refuse it first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from maintd.errors import PolicyError
from maintd.planner import Policy, with_overrides
from maintd.planner.targets import Targets
from maintd.simulate.measure import Measures

MIB = 1024 * 1024
Path_ = tuple[str, ...]

KNOBS: tuple[tuple[Path_, tuple[float, ...]], ...] = (
    (("compaction", "max_delta_files"), (4, 8, 16, 32, 64, 128)),
    (("clustering", "level1", "min_files"), (2, 3, 4, 6, 8, 12, 16, 24, 32)),
    (("clustering", "level1", "max_age_hours"), (0.1, 0.25, 0.5, 1, 2, 4, 8)),
    (("clustering", "level1", "trigger_bytes"), (4 * MIB, 8 * MIB, 16 * MIB, 32 * MIB, 64 * MIB, 128 * MIB)),
    (("clustering", "level2", "min_files"), (2, 4, 8, 16)),
    (("compaction", "delta_base_ratio"), (0.1, 0.25, 0.5, 1, 2, 4)),
    (("compaction", "max_interval_hours"), (6, 12, 24, 48, 96)),
    (("compaction", "min_interval_hours"), (0, 0.5, 1, 2, 4)),
)
"""The knobs searched and the values tried for each (the current value is tried too)."""
_INTEGER_KNOBS = frozenset({"min_files", "trigger_bytes", "max_delta_files"})
INTERVALS: tuple[float, ...] = (300, 600, 900, 1800, 3600)
"""Maintenance intervals tried, in seconds (the current one is tried too)."""


@dataclass(frozen=True)
class Candidate:
    """Knob values over the current policy, and the maintenance interval."""

    knobs: tuple[tuple[Path_, float], ...]
    interval_s: float

    def with_knob(self, path: Path_, value: float) -> Candidate:
        knobs = dict(self.knobs)
        knobs[path] = value
        return Candidate(tuple(sorted(knobs.items())), self.interval_s)

    def overrides(self) -> dict[str, Any]:
        return nest(dict(self.knobs))

    def label(self, current: Policy, current_interval_s: float) -> str:
        """The knobs that differ from ``current``, short (``l1.min_files=4 every 600s``)."""
        parts = [f"{'.'.join(p[-2:]).replace('level', 'l')}={_num(v)}" for p, v in self.knobs
                 if get(current, p) != v]
        if self.interval_s != current_interval_s:
            parts.append(f"every {_num(self.interval_s)}s")
        return " ".join(parts) or "current"


def _num(v: float) -> str:
    if v >= MIB and v % MIB == 0:
        return f"{v / MIB:g}MiB"
    return f"{v:g}"


def nest(flat: Mapping[Path_, Any]) -> dict[str, Any]:
    """``{("a", "b"): 1}`` as ``{"a": {"b": 1}}``."""
    out: dict[str, Any] = {}
    for path, value in sorted(flat.items()):
        node = out
        for p in path[:-1]:
            node = node.setdefault(p, {})
        node[path[-1]] = int(value) if path[-1] in _INTEGER_KNOBS else float(value)
    return out


def get(policy: Policy, path: Path_) -> float:
    node: Any = policy
    for p in path:
        node = getattr(node, p)
    return float(node)


def diff(new: Mapping[str, Any], old: Mapping[str, Any]) -> dict[str, Any]:
    """The nested keys of ``new`` whose values differ from ``old`` (a policy file's overrides)."""
    out: dict[str, Any] = {}
    for k, v in new.items():
        if isinstance(v, Mapping) and isinstance(old.get(k), Mapping):
            d = diff(v, old[k])
            if d:
                out[k] = d
        elif old.get(k) != v:
            out[k] = v
    return out


def policy_of(current: Policy, c: Candidate) -> Policy | None:
    """The candidate's full policy, or None when the policy models refuse the combination."""
    try:
        return with_overrides(current, c.overrides(), where="tuning candidate")
    except PolicyError:
        return None


def start_candidate(current: Policy, interval_s: float) -> Candidate:
    return Candidate(tuple(sorted((p, get(current, p)) for p, _ in KNOBS)), interval_s)


def neighbours(c: Candidate, current: Policy, current_interval_s: float) -> list[list[Candidate]]:
    """Per coordinate (each knob, then the interval), every other value of its grid, in grid order."""
    groups = []
    knobs = dict(c.knobs)
    for path, grid in KNOBS:
        values = sorted({*grid, get(current, path)})
        groups.append([c.with_knob(path, v) for v in values if v != knobs[path]])
    intervals = sorted({*INTERVALS, current_interval_s})
    groups.append([Candidate(c.knobs, i) for i in intervals if i != c.interval_s])
    return groups


Key = tuple[bool, float, int, int]


def key(m: Measures, targets: Targets) -> Key:
    """Sort key of a measured candidate: meets all targets first, then least shortfall, bytes, runs."""
    short = shortfall(m, targets)
    return short > 0, round(short, 6), m.bytes_rewritten, m.runs


def shortfall(m: Measures, targets: Targets) -> float:
    """Sum of the relative gaps of the targets ``m`` misses (0: meets every one)."""
    return sum(g for g in targets.gaps(m.as_dict()).values() if g > 1e-9)


def pareto(points: Sequence[tuple[float, float, int, str]]) -> list[tuple[float, float, int, str]]:
    """The points no other beats on both read files and write amplification, by read files ascending."""
    front: list[tuple[float, float, int, str]] = []
    for p in sorted(points, key=lambda p: (p[0], p[1], p[2], p[3])):
        if not front or p[1] < front[-1][1] - 1e-12:
            front.append(p)
    return front


__all__ = ["INTERVALS", "KNOBS", "Candidate", "diff", "get", "key", "neighbours", "nest", "pareto", "policy_of",
           "shortfall", "start_candidate"]
