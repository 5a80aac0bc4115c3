"""Tuning: the cheapest policy (least bytes rewritten) that meets a table's targets, found with the simulator.

``maintd tune`` learns the table's write pattern once (as ``maintd simulate`` does), then searches the policy
knobs and the maintenance interval (:mod:`~maintd.simulate.search`), simulating each candidate through the real
planner and measuring it (:mod:`~maintd.simulate.measure`). Two stages keep a week's search within its time
budget. First comes a coordinate search over a short horizon (one day), ranked by ceilings calibrated against
the whole horizon from the start (the current policy runs on both). Then the best candidates are simulated over
the whole horizon, where runs that rewrite more than the cheapest one meeting the targets are cut short. Candidates are
simulated in batches, over several processes when there are CPUs (:mod:`~maintd.simulate.evaluate`). The
answer is the chosen policy with its predictions beside the current one's, the trade-off curve between read
and write amplification, and which target binds: the one the choice is closest to missing, or, when a complete
search found no candidate meeting them all, the targets none meets. A search the time budget ended never
claims that no policy meets the targets: it says it was cut, what the best candidate found reaches, and how to
give it more time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from maintd.planner import Policy
from maintd.planner.targets import TARGET_NAMES, TargetName, Targets
from maintd.simulate.evaluate import Evaluator, Job
from maintd.simulate.measure import Measures
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
    evaluator: Evaluator
    deadline: float
    clock: Callable[[], float]
    evaluated: int = 0
    coarse_targets: Targets = field(default_factory=Targets)
    """The targets the short horizon is ranked by: tightened where it proved too kind (see :func:`_calibrate`)."""
    coarse: dict[Candidate, Measures] = field(default_factory=dict)
    full: dict[Candidate, Measures] = field(default_factory=dict)

    def run(self, batch: Sequence[Candidate], days: int, *, bound: int | None = None,
            until: float | None = None) -> list[Measures | None]:
        """Simulate ``batch`` (one bound for all: the answer does not depend on which finishes first); None for
        a candidate the policy models refuse or a run that was cut."""
        policies = [policy_of(self.current, c) for c in batch]
        # the workers' deadline is on the shared monotonic clock, whatever clock the search reads
        deadline = None if until is None else time.monotonic() + (until - self.clock())
        jobs = [Job(p, c.interval_s, days, bound, deadline) for c, p in zip(batch, policies, strict=True)
                if p is not None]
        self.evaluated += len(jobs)
        got = iter(self.evaluator.run(jobs))
        return [None if p is None else next(got) for p in policies]

    def run_mixed(self, batch: Sequence[tuple[Candidate, int, int | None]], until: float | None = None
                  ) -> list[Measures | None]:
        """Runs of candidates, each over its own number of days and byte bound (fixed before the batch)."""
        policies = [policy_of(self.current, c) for c, _, _ in batch]
        deadline = None if until is None else time.monotonic() + (until - self.clock())
        jobs = [Job(p, c.interval_s, d, b, deadline) for (c, d, b), p in zip(batch, policies, strict=True)
                if p is not None]
        self.evaluated += len(jobs)
        got = iter(self.evaluator.run(jobs))
        return [None if p is None else next(got) for p in policies]


def tune(learned: Learned, targets: Targets, current: Policy, *, days: int = 7, interval_seconds: float = 300.0,
         now_ms: int | None = None, time_budget_s: float = 60.0, reclamation_interval_seconds: float =
         RECLAMATION_INTERVAL_S, clock: Callable[[], float] = time.monotonic, workers: int = 1,
         coarse_days: int = COARSE_DAYS) -> TuneResult:
    """Search for the cheapest policy meeting ``targets`` on an already learned pattern (see the module).

    ``workers`` processes simulate candidates side by side (the answer is the same for any number);
    ``coarse_days`` is the first stage's horizon.
    """
    check_days(days)
    check_size(learned.pattern, days, learned.pattern.table_uri)
    started = clock()
    start_ms = learned.pattern.end_ms if now_ms is None else now_ms
    with Evaluator(learned, start_ms, reclamation_interval_seconds, workers) as evaluator:
        s = _Search(learned, targets, current, interval_seconds, evaluator, started + time_budget_s, clock)
        return _search(s, days, min(days, coarse_days), started + time_budget_s * COARSE_SHARE)


def _search(s: _Search, days: int, coarse_days: int, until: float) -> TuneResult:
    first = start_candidate(s.current, s.current_interval_s)
    # the current policy on both horizons (the whole one always, the short one to calibrate by), beside the
    # first coordinate's values on the short one, so no worker waits for the long run
    opening = [c for c in neighbours(first, s.current, s.current_interval_s)[0]]
    if coarse_days < days:
        base, short, *got = s.run([first], days) + s.run([first, *opening], coarse_days) \
            if s.evaluator.workers == 1 else _opening(s, first, opening, days, coarse_days)
    else:
        base, *got = s.run([first, *opening], days)
        short = base
    assert base is not None and short is not None, "the current policy is valid"
    s.full[first], s.coarse[first] = base, short
    s.coarse.update((c, m) for c, m in zip(opening, got, strict=True) if m is not None)
    scale = _calibrate(s, dict.fromkeys(s.targets.declared(), 1.0), every=True)
    while True:
        s.coarse_targets = _scaled(s.targets, scale)
        complete = _coordinate_search(s, first, coarse_days, until)
        complete = _check_shortlist(s, days) and complete
        new = _calibrate(s, scale)
        if not complete or new == scale or _feasible(s):
            break
        scale, until = new, s.deadline - (s.deadline - s.clock()) * (1 - COARSE_SHARE)
    return _result(s, first, days, complete)


def _opening(s: _Search, first: Candidate, opening: list[Candidate], days: int, coarse_days: int
             ) -> list[Measures | None]:
    """The current policy over the whole horizon and ``[first, *opening]`` over the short one, as one batch."""
    jobs = [(first, days, None), (first, coarse_days, None), *((c, coarse_days, None) for c in opening)]
    return s.run_mixed(jobs)


def _scaled(targets: Targets, scale: dict[TargetName, float]) -> Targets:
    """``targets`` with each ceiling multiplied by its scale (the short horizon's margin)."""
    values: dict[str, Any] = {n: v * scale[n] for n, v in targets.declared().items()}
    return Targets.model_construct(None, **values)  # below the models' floors on purpose: a ranking aid only


def _feasible(s: _Search) -> bool:
    return any(shortfall(m, s.targets) == 0 for m in s.full.values())


def _calibrate(s: _Search, scale: dict[TargetName, float], *, every: bool = False) -> dict[TargetName, float]:
    """Tighter short-horizon ceilings where candidates that met one over the short horizon missed it over the
    whole: by the largest ratio seen between the two measures (the short horizon flatters them). With ``every``
    (before the search, from the current policy alone) by the ratio of any candidate the short horizon flatters,
    met or not, so the first search already ranks by what the whole horizon will show."""
    new = dict(scale)
    for c, full in s.full.items():
        short = s.coarse.get(c)
        if short is None:
            continue
        for n, goal in s.targets.declared().items():
            f, m = full.as_dict()[n], short.as_dict()[n]
            if f > 0 and m < f and (every or (f > goal + 1e-9 and m <= goal * scale[n] + 1e-9)):
                new[n] = min(new[n], scale[n] * max(m, 1e-9) / f * 0.98)
    return new


def _coordinate_search(s: _Search, first: Candidate, days: int, until: float) -> bool:
    """Coordinate passes over the short horizon until one improves nothing; False when time ran out.

    Each coordinate's new values are simulated as one batch, bounded by the best known before it, then every
    value is ranked in grid order: ties go to the value tried first, as in a one-at-a-time search."""
    best = min(s.coarse, key=lambda c: key(s.coarse[c], s.coarse_targets))
    best_key = key(s.coarse[best], s.coarse_targets)
    tried: set[Candidate] = set(s.coarse)
    improved = True
    while improved:
        improved = False
        for coordinate in range(len(neighbours(best, s.current, s.current_interval_s))):
            group = neighbours(best, s.current, s.current_interval_s)[coordinate]
            new = [c for c in group if c not in s.coarse and c not in tried]
            if new:
                if s.clock() > until:
                    return False
                tried.update(new)
                bound = None if best_key[0] else s.coarse[best].bytes_rewritten
                for c, got in zip(new, s.run(new, days, bound=bound, until=until), strict=True):
                    if got is not None:
                        s.coarse[c] = got
            for c in group:
                if c in s.coarse and (k := key(s.coarse[c], s.coarse_targets)) < best_key:
                    best, best_key, improved = c, k, True
            if new and s.clock() > until:
                return False
    return True


def _check_shortlist(s: _Search, days: int) -> bool:
    """The best candidates of the short horizon (bounded by the cheapest known to meet the targets), then the
    points of its curve, simulated on the whole horizon. Those bounded the same way except the end with the
    fewest read files, so the curve keeps its reach without simulating in full what cannot be chosen."""
    ranked = sorted(s.coarse, key=lambda c: key(s.coarse[c], s.coarse_targets))
    front = {p[3] for p in pareto([_point(s.coarse[c], c, s) for c in s.coarse])}
    curve = [c for c in ranked if _label(c, s) in front]
    end = min(curve, key=lambda c: _point(s.coarse[c], c, s)[:2], default=None)
    short = [c for c in ranked[:SHORTLIST] if c not in s.full]
    for batch in (short, [c for c in dict.fromkeys(curve) if c not in s.full and c not in short]):
        if not batch:
            continue
        if s.clock() > s.deadline:
            return False
        best = min(s.full.values(), key=lambda m: key(m, s.targets))
        bound = best.bytes_rewritten if shortfall(best, s.targets) == 0 else None
        jobs = [(c, days, None if c == end else bound) for c in batch]
        for c, got in zip(batch, s.run_mixed(jobs, until=s.deadline), strict=True):
            if got is not None:
                s.full[c] = got
        if s.clock() > s.deadline:
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
    binding = _binding(s, m, meets, complete)
    return TuneResult(
        policy=policy, overrides=diff(policy.model_dump(), s.current.model_dump()), interval_seconds=chosen.interval_s,
        meets=meets, binding=binding, reason=_reason(s, m, base, meets, binding, chosen == first, complete),
        predicted=m.as_dict(), current_predicted=base.as_dict(), curve=_curve(s, first, chosen), targets=s.targets,
        current_interval_seconds=s.current_interval_s, days=days, runs=m.runs, current_runs=base.runs,
        evaluated=s.evaluated, complete=complete)


def _curve(s: _Search, first: Candidate, chosen: Candidate) -> tuple[CurvePoint, ...]:
    """The Pareto front of the whole-horizon runs plus the tuned and current points, one point per figures:
    of candidates that measure the same, the tuned or current one is shown, else the one changing fewest knobs."""
    def name(c: Candidate) -> str:
        return ("current = tuned" if c == first else "tuned") if c == chosen else \
            "current" if c == first else _label(c, s)

    def preference(c: Candidate) -> tuple[int, int, int, str]:
        label = _label(c, s)
        changed = 0 if label == "current" else len(label.split(" "))
        return c not in (chosen, first), s.full[c].runs, changed, name(c)

    points: dict[tuple[float, float, int], CurvePoint] = {}
    for c in sorted(s.full, key=preference):
        points.setdefault(_point(s.full[c], c, s)[:3], (*_point(s.full[c], c, s)[:3], name(c)))
    kept = list(points.values())
    curve = pareto(kept)
    curve += [p for p in kept if p[3] in (name(chosen), name(first)) and p not in curve]
    return tuple(sorted(curve, key=lambda p: (p[0], p[1], p[2], p[3])))


def _binding(s: _Search, m: Measures, meets: bool, complete: bool) -> tuple[TargetName, ...]:
    """Meeting: the target closest to its ceiling. Missing after a complete search: the targets no candidate
    met, else those missed. Missing after a search the budget cut: none (nothing shows what binds)."""
    gaps = s.targets.gaps(m.as_dict())
    if meets:
        return (max(gaps, key=lambda n: (gaps[n], -TARGET_NAMES.index(n))),) if gaps else ()
    if not complete:
        return ()
    every = list(s.full.values())
    never = tuple(n for n in s.targets.declared() if all(s.targets.gaps(x.as_dict())[n] > 1e-9 for x in every))
    return never or tuple(s.targets.missed(m.as_dict()))


MORE_TIME = "give it more time: maintd tune --time-budget SECONDS, or the daemon's tuning.time_budget_seconds"


def _reason(s: _Search, m: Measures, base: Measures, meets: bool, binding: tuple[TargetName, ...], same: bool,
            complete: bool) -> str:
    declared = s.targets.declared()
    if not meets and not complete:
        reached = "; ".join(f"{n} {m.as_dict()[n]:.3g} (target <= {declared[n]:g})"
                            for n in s.targets.missed(m.as_dict()))
        return (f"the time budget ended the search after {s.evaluated} simulated policies, before it converged; "
                f"the best found misses: {reached}; that does not show the targets cannot be met: "
                f"{MORE_TIME}")
    if not meets:
        best = {n: min(x.as_dict()[n] for x in s.full.values()) for n in binding}
        what = "; ".join(f"{n} <= {declared[n]:g} (best reached {best[n]:.3g})" for n in binding)
        return f"no policy of the {s.evaluated} simulated meets every target: {what}; relax the binding target"
    b = binding[0]
    slack = f"{b} binds ({m.as_dict()[b]:.3g} of at most {declared[b]:g})"
    cut = "" if complete else (f"; the time budget ended the search before it converged, so a cheaper policy may "
                               f"meet them too ({MORE_TIME})")
    if same:
        return f"the current policy is already the cheapest {'' if complete else 'found '}that meets every " \
               f"target; {slack}{cut}"
    was = "meets" if shortfall(base, s.targets) == 0 else "misses " + ", ".join(s.targets.missed(base.as_dict()))
    change = (f"rewrites {_pct(m.bytes_rewritten, base.bytes_rewritten)} the current policy's bytes"
              if base.bytes_rewritten else f"rewrites {m.bytes_rewritten} bytes")
    return (f"cheapest of {s.evaluated} simulated policies that meets every target: {change} (current {was}); "
            f"{slack}{cut}")


def _pct(new: int, old: int) -> str:
    return f"{new / old:.0%} of"


def tune_table(table: Table, targets: Targets, current: Policy, *, days: int = 7, interval_seconds: float = 300.0,
               now_ms: int | None = None, time_budget_s: float = 60.0, schedule: Schedule | None = None,
               hours: float | None = 24.0, workers: int = 1) -> TuneResult:
    """Learn ``table``'s write pattern as ``maintd simulate`` does, then :func:`tune` it.

    ``schedule`` (recorded runs or settings) gives the current interval and the reclamation cadence; otherwise
    ``interval_seconds``, with reclamation every 6 hours (the daemon's default). ``workers``: see :func:`tune`.

    Raises:
        InvalidInputError: ``days`` out of range, or a table with no write history to learn from.
    """
    check_days(days)
    learned = learn(table, hours=hours)
    interval = schedule.maintenance_interval_s if schedule is not None else interval_seconds
    reclaim = schedule.reclamation_interval_s if schedule is not None else RECLAMATION_INTERVAL_S
    return tune(learned, targets, current, days=days, interval_seconds=interval, now_ms=now_ms,
                time_budget_s=time_budget_s, reclamation_interval_seconds=reclaim, workers=workers)


__all__ = ["COARSE_DAYS", "CurvePoint", "TuneResult", "tune", "tune_table"]
