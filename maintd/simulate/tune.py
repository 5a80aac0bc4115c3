"""Tuning: the cheapest policy (least bytes rewritten) that meets a table's targets, found with the simulator.

``maintd tune`` learns the table's write pattern once (as ``maintd simulate`` does), then searches the policy
knobs and the maintenance interval (:mod:`~maintd.simulate.search`), simulating each candidate through the real
planner and measuring it (:mod:`~maintd.simulate.measure`). Two stages keep a week's search within its time
budget: a coordinate search over a short horizon (one day), then the best candidates simulated over
the whole horizon, where runs that rewrite more than the cheapest one meeting the targets are cut short. The
answer is the chosen policy with its predictions beside the current one's, the trade-off curve between read
and write amplification, and which target binds: the one the choice is closest to missing, or, when no
candidate meets them all, the targets none meets.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from maintd.planner import Policy
from maintd.planner.targets import TARGET_NAMES, TargetName, Targets
from maintd.simulate.measure import Cut, Measures, measure
from maintd.simulate.report import DAY_MS
from maintd.simulate.schedule import Schedule
from maintd.simulate.search import (
    Candidate,
    diff,
    key,
    neighbours,
    pareto,
    policy_of,
    shortfall,
    start_candidate,
)
from maintd.simulate.simulator import Learned, check_days, check_size, learn
from maintd.table import Table

COARSE_DAYS = 1
"""Horizon of the first stage (days): a whole daily cycle of writes, short enough for many candidates."""
COARSE_SHARE = 0.55
"""Share of the time budget the first stage may use; the rest checks the best candidates on the whole horizon."""
SHORTLIST = 3
"""Candidates of the first stage simulated on the whole horizon, best first."""
RECLAMATION_INTERVAL_S = 21600.0

CurvePoint = tuple[float, float, int, str]


@dataclass(frozen=True)
class TuneResult:
    """What tuning chose and why. Measures are keyed by the target names plus ``bytes_rewritten``."""

    policy: Policy
    overrides: dict[str, Any]
    interval_seconds: float
    meets: bool
    binding: tuple[str, ...]
    reason: str
    predicted: dict[str, float]
    current_predicted: dict[str, float]
    curve: tuple[CurvePoint, ...]
    """Pareto front of (read files per bucket p95, write amplification, bytes rewritten, label), by read files."""
    targets: Targets = field(default_factory=Targets)
    current_interval_seconds: float = 300.0
    days: int = 7
    runs: int = 0
    current_runs: int = 0
    evaluated: int = 0
    """Simulations run (both stages, cut ones included)."""
    complete: bool = True
    """False when the time budget ended the search before it converged."""


@dataclass
class _Search:
    learned: Learned
    targets: Targets
    current: Policy
    current_interval_s: float
    reclamation_s: float
    start_ms: int
    deadline: float
    evaluated: int = 0
    coarse_targets: Targets = field(default_factory=Targets)
    """The targets the short horizon is ranked by: tightened where it proved too kind (see :func:`_calibrate`)."""
    coarse: dict[Candidate, Measures] = field(default_factory=dict)
    full: dict[Candidate, Measures] = field(default_factory=dict)

    def run(self, c: Candidate, days: int, *, bound: int | None = None, deadline: float | None = None
            ) -> Measures | None:
        policy = policy_of(self.current, c)
        if policy is None:
            return None
        self.evaluated += 1
        schedule = Schedule(c.interval_s, self.reclamation_s, "tuning")
        try:
            return measure(self.learned, policy, schedule, start_ms=self.start_ms,
                           end_ms=self.start_ms + days * DAY_MS, max_rewritten=bound, deadline=deadline)
        except Cut:
            return None


def tune(learned: Learned, targets: Targets, current: Policy, *, days: int = 7, interval_seconds: float = 300.0,
         now_ms: int | None = None, time_budget_s: float = 60.0, reclamation_interval_seconds: float =
         RECLAMATION_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> TuneResult:
    """Search for the cheapest policy meeting ``targets`` on an already learned pattern (see the module)."""
    check_days(days)
    check_size(learned.pattern, days, learned.pattern.table_uri)
    started = clock()
    start_ms = learned.pattern.end_ms if now_ms is None else now_ms
    s = _Search(learned, targets, current, interval_seconds, reclamation_interval_seconds, start_ms,
                started + time_budget_s)
    first = start_candidate(current, interval_seconds)
    base = s.run(first, days)  # the current policy, on the whole horizon, always
    assert base is not None, "the current policy is valid"
    s.full[first] = base
    coarse_days = min(days, COARSE_DAYS)
    complete = True
    scale = dict.fromkeys(targets.declared(), 1.0)
    until = started + time_budget_s * COARSE_SHARE
    while True:
        s.coarse_targets = _scaled(targets, scale)
        complete = _coordinate_search(s, first, coarse_days, until, clock)
        complete &= _check_shortlist(s, days, clock)
        new = _calibrate(s, scale)
        if not complete or new == scale or _feasible(s):
            break
        scale, until = new, s.deadline - (s.deadline - clock()) * (1 - COARSE_SHARE)
    return _result(s, first, days, complete)


def _scaled(targets: Targets, scale: dict[TargetName, float]) -> Targets:
    """``targets`` with each ceiling multiplied by its scale (the short horizon's margin)."""
    values: dict[str, Any] = {n: v * scale[n] for n, v in targets.declared().items()}
    return Targets.model_construct(None, **values)  # below the models' floors on purpose: a ranking aid only


def _feasible(s: _Search) -> bool:
    return any(shortfall(m, s.targets) == 0 for m in s.full.values())


def _calibrate(s: _Search, scale: dict[TargetName, float]) -> dict[TargetName, float]:
    """Tighter short-horizon ceilings where candidates that met one over the short horizon missed it over the
    whole: by the largest ratio seen between the two measures (the short horizon flatters them)."""
    new = dict(scale)
    for c, full in s.full.items():
        short = s.coarse.get(c)
        if short is None:
            continue
        for n, goal in s.targets.declared().items():
            f, m = full.as_dict()[n], short.as_dict()[n]
            if f > goal + 1e-9 and m <= goal * scale[n] + 1e-9 and f > 0:
                new[n] = min(new[n], scale[n] * max(m, 1e-9) / f * 0.98)
    return new


def _coordinate_search(s: _Search, first: Candidate, days: int, until: float, clock: Callable[[], float]) -> bool:
    """Coordinate passes over the short horizon until one improves nothing; False when time ran out."""
    if first not in s.coarse:
        m = s.run(first, days)
        if m is None:
            return False
        s.coarse[first] = m
    first = min(s.coarse, key=lambda c: key(s.coarse[c], s.coarse_targets))
    m = s.coarse[first]
    best, best_key = first, key(m, s.coarse_targets)
    tried: set[Candidate] = {first}
    improved = True
    while improved:
        improved = False
        for coordinate in range(len(neighbours(best, s.current, s.current_interval_s))):
            for c in neighbours(best, s.current, s.current_interval_s)[coordinate]:
                if c in s.coarse:  # simulated before: ranked again, under today's ceilings
                    if (k := key(s.coarse[c], s.coarse_targets)) < best_key:
                        best, best_key, improved = c, k, True
                    continue
                if c in tried:
                    continue
                if clock() > until:
                    return False
                tried.add(c)
                bound = None if best_key[0] else s.coarse[best].bytes_rewritten
                got = s.run(c, days, bound=bound, deadline=until)
                if got is None:
                    continue
                s.coarse[c] = got
                if (k := key(got, s.coarse_targets)) < best_key:
                    best, best_key, improved = c, k, True
    return True


def _check_shortlist(s: _Search, days: int, clock: Callable[[], float]) -> bool:
    """The best candidates of the short horizon, then the ends of its curve, simulated on the whole horizon."""
    ranked = sorted(s.coarse, key=lambda c: key(s.coarse[c], s.coarse_targets))
    front = {p[3] for p in pareto([_point(s.coarse[c], c, s) for c in s.coarse])}
    curve = [c for c in ranked if _label(c, s) in front]
    for i, c in enumerate(dict.fromkeys([*ranked[:SHORTLIST], *curve])):
        if c in s.full:
            continue
        if clock() > s.deadline:
            return False
        best = min(s.full.values(), key=lambda m: key(m, s.targets))
        feasible = shortfall(best, s.targets) == 0
        bound = best.bytes_rewritten if feasible and i < SHORTLIST else None
        got = s.run(c, days, bound=bound, deadline=s.deadline)
        if got is not None:
            s.full[c] = got
        elif clock() > s.deadline:
            return False
    return True


def _label(c: Candidate, s: _Search) -> str:
    return c.label(s.current, s.current_interval_s)


def _point(m: Measures, c: Candidate, s: _Search) -> CurvePoint:
    return m.read_files_per_bucket, m.write_amplification, m.bytes_rewritten, _label(c, s)


def _result(s: _Search, first: Candidate, days: int, complete: bool) -> TuneResult:
    chosen = min(s.full, key=lambda c: (key(s.full[c], s.targets), c != first))
    m, base = s.full[chosen], s.full[first]
    policy = (policy_of(s.current, chosen) or s.current).model_copy(update={"target": s.targets})
    meets = shortfall(m, s.targets) == 0
    binding = _binding(s, m, meets)
    def name(c: Candidate) -> str:
        return ("current = tuned" if c == first else "tuned") if c == chosen else \
            "current" if c == first else _label(c, s)

    points = {name(c): (*_point(s.full[c], c, s)[:3], name(c)) for c in s.full}
    curve = pareto(list(points.values()))
    curve += [points[n] for n in dict.fromkeys((name(chosen), name(first))) if points[n] not in curve]
    curve.sort(key=lambda p: (p[0], p[1]))
    return TuneResult(
        policy=policy, overrides=diff(policy.model_dump(), s.current.model_dump()), interval_seconds=chosen.interval_s,
        meets=meets, binding=binding, reason=_reason(s, m, base, meets, binding, chosen == first),
        predicted=m.as_dict(), current_predicted=base.as_dict(), curve=tuple(curve), targets=s.targets,
        current_interval_seconds=s.current_interval_s, days=days, runs=m.runs, current_runs=base.runs,
        evaluated=s.evaluated, complete=complete)


def _binding(s: _Search, m: Measures, meets: bool) -> tuple[TargetName, ...]:
    """Meeting: the target closest to its ceiling. Missing: the targets no candidate met, else those missed."""
    gaps = s.targets.gaps(m.as_dict())
    if meets:
        return (max(gaps, key=lambda n: (gaps[n], -TARGET_NAMES.index(n))),) if gaps else ()
    every = list(s.full.values())
    never = tuple(n for n in s.targets.declared() if all(s.targets.gaps(x.as_dict())[n] > 1e-9 for x in every))
    return never or tuple(s.targets.missed(m.as_dict()))


def _reason(s: _Search, m: Measures, base: Measures, meets: bool, binding: tuple[TargetName, ...], same: bool
            ) -> str:
    declared = s.targets.declared()
    if not meets:
        best = {n: min(x.as_dict()[n] for x in s.full.values()) for n in binding}
        what = "; ".join(f"{n} <= {declared[n]:g} (best reached {best[n]:.3g})" for n in binding)
        return f"no policy of the {s.evaluated} simulated meets every target: {what}; relax the binding target"
    b = binding[0]
    slack = f"{b} binds ({m.as_dict()[b]:.3g} of at most {declared[b]:g})"
    if same:
        return f"the current policy is already the cheapest that meets every target; {slack}"
    was = "meets" if shortfall(base, s.targets) == 0 else "misses " + ", ".join(s.targets.missed(base.as_dict()))
    change = (f"rewrites {_pct(m.bytes_rewritten, base.bytes_rewritten)} the current policy's bytes"
              if base.bytes_rewritten else f"rewrites {m.bytes_rewritten} bytes")
    return f"cheapest of {s.evaluated} simulated policies that meets every target: {change} (current {was}); {slack}"


def _pct(new: int, old: int) -> str:
    return f"{new / old:.0%} of"


def tune_table(table: Table, targets: Targets, current: Policy, *, days: int = 7, interval_seconds: float = 300.0,
               now_ms: int | None = None, time_budget_s: float = 60.0, schedule: Schedule | None = None,
               hours: float | None = 24.0) -> TuneResult:
    """Learn ``table``'s write pattern as ``maintd simulate`` does, then :func:`tune` it.

    ``schedule`` (recorded runs or settings) gives the current interval and the reclamation cadence; otherwise
    ``interval_seconds``, with reclamation every 6 hours (the daemon's default).

    Raises:
        InvalidInputError: ``days`` out of range, or a table with no write history to learn from.
    """
    check_days(days)
    learned = learn(table, hours=hours)
    interval = schedule.maintenance_interval_s if schedule is not None else interval_seconds
    reclaim = schedule.reclamation_interval_s if schedule is not None else RECLAMATION_INTERVAL_S
    return tune(learned, targets, current, days=days, interval_seconds=interval, now_ms=now_ms,
                time_budget_s=time_budget_s, reclamation_interval_seconds=reclaim)


__all__ = ["COARSE_DAYS", "CurvePoint", "TuneResult", "tune", "tune_table"]
