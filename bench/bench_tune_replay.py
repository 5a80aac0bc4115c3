"""Proof by replay: does the tuned policy meet its targets where the packaged default does not?

For each recorded write pattern (steady, bursty, update-heavy; ``replay_patterns.py``) and seed:

1. record: the pattern is written for ``--hours`` of pattern time into a real table maintained by the packaged
   default policy every 5 minutes (real planner, local executor, real commits, at compressed time);
2. tune: ``maintd.simulate.tune.tune_table`` learns that table's writes from its log and searches the cheapest
   policy and interval that meet the pattern's targets over the next ``--hours`` (what ``maintd tune`` does);
3. continue: two copies of the recorded table are written on for ``--hours`` more with the same rows at the same
   times, one maintained by the default policy, one by the tuned policy at the tuned interval, and measured.

The tuner's predictions are for exactly that continuation (same starting table, same horizon), so they are
printed beside what the continuations measured: medians over the seeds, with their spread::

    .venv/bin/python bench/bench_tune_replay.py --hours 24 --seeds 1,2,3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from replay_patterns import PATTERNS, T0, Measured, record, resume

from maintd.execution.cpus import usable_cpus
from maintd.planner import default_policy
from maintd.planner.targets import Targets
from maintd.simulate.tune import tune_table
from maintd.table import Table

#: What each pattern's readers and freshness need; the default policy misses at least one on each.
TARGETS = {
    "steady": Targets(read_files_per_bucket=8, merge_delay_minutes=30),
    "bursty": Targets(read_files_per_bucket=10, merge_delay_minutes=45),
    "update-heavy": Targets(read_files_per_bucket=8, merge_delay_minutes=30, write_amplification=1.5),
}
DEFAULT_INTERVAL = timedelta(minutes=5)
FIGURES = ("read_files_per_bucket", "merge_delay_minutes", "write_amplification", "bytes_rewritten")


def _measured(m: Measured) -> dict[str, float]:
    return {**m.as_targets(), "bytes_rewritten": float(m.rewritten_bytes)}


def _meets(targets: Targets, figures: dict[str, float]) -> bool:
    return not targets.missed(figures)


def one(root: Path, name: str, seed: int, hours: float, budget_s: float) -> dict[str, Any]:
    pattern, targets = PATTERNS[name], TARGETS[name]
    default = default_policy()
    started = time.perf_counter()
    recorded, writer, _ = record(root, pattern, default, interval=DEFAULT_INTERVAL, hours=hours, seed=seed)
    record_s = time.perf_counter() - started
    switch = T0 + timedelta(hours=hours)
    started = time.perf_counter()
    days = max(1, round(hours / 24))
    result = tune_table(Table.open(recorded), targets, default, days=days,
                        interval_seconds=DEFAULT_INTERVAL.total_seconds(), now_ms=int(switch.timestamp() * 1000),
                        time_budget_s=budget_s, hours=hours, workers=usable_cpus())
    tune_s = time.perf_counter() - started
    base = resume(recorded, root / "default", writer, pattern, default, interval=DEFAULT_INTERVAL, start=switch,
                  hours=24.0 * days)
    tuned = resume(recorded, root / "tuned", writer, pattern, result.policy,
                   interval=timedelta(seconds=result.interval_seconds), start=switch, hours=24.0 * days)
    return {"pattern": name, "seed": seed, "targets": targets.declared(), "interval_s": result.interval_seconds,
            "overrides": result.overrides, "tuner_meets": result.meets, "reason": result.reason,
            "complete": result.complete,
            "default_measured": _measured(base), "default_predicted": result.current_predicted,
            "tuned_measured": _measured(tuned), "tuned_predicted": result.predicted,
            "default_meets": _meets(targets, _measured(base)), "tuned_meets": _meets(targets, _measured(tuned)),
            "record_s": round(record_s, 1), "tune_s": round(tune_s, 1)}


def _median(rows: list[dict[str, Any]], key: str, figure: str) -> str:
    values = [float(r[key][figure]) for r in rows if figure in r[key]]
    if not values:
        return "-"
    scale, unit = (2**20, " MiB") if figure == "bytes_rewritten" else (1, "")
    med = statistics.median(values) / scale
    return f"{med:.2f}{unit} ({min(values) / scale:.2f}-{max(values) / scale:.2f})"


def report(rows: list[dict[str, Any]]) -> str:
    out = []
    for name in dict.fromkeys(r["pattern"] for r in rows):
        mine = [r for r in rows if r["pattern"] == name]
        declared = ", ".join(f"{k} <= {v:g}" for k, v in mine[0]["targets"].items())
        out.append(f"\n### {name} ({len(mine)} seeds; targets {declared})\n")
        out.append("| figure | default, measured | default, predicted | tuned, measured | tuned, predicted |")
        out.append("|---|---|---|---|---|")
        for fig in FIGURES:
            out.append(f"| {fig} | {_median(mine, 'default_measured', fig)} | "
                       f"{_median(mine, 'default_predicted', fig)} | {_median(mine, 'tuned_measured', fig)} | "
                       f"{_median(mine, 'tuned_predicted', fig)} |")
        out.append(f"| meets every target (seeds) | {sum(r['default_meets'] for r in mine)}/{len(mine)} | - | "
                   f"{sum(r['tuned_meets'] for r in mine)}/{len(mine)} | "
                   f"{sum(r['tuner_meets'] for r in mine)}/{len(mine)} predicted |")
        intervals = sorted(r["interval_s"] for r in mine)
        out.append(f"\ntuned interval {statistics.median(intervals):g} s ({intervals[0]:g}-{intervals[-1]:g}); "
                   f"tuning took {statistics.median(r['tune_s'] for r in mine):.1f} s (median; searches cut by the "
                   f"time budget: {sum(not r['complete'] for r in mine)}), a recording "
                   f"{statistics.median(r['record_s'] for r in mine):.1f} s; seed {mine[0]['seed']}'s tuned knobs: "
                   f"{json.dumps(mine[0]['overrides'], sort_keys=True)}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=24.0,
                    help="pattern time recorded, and continued after tuning (hours; the continuation is whole days)")
    ap.add_argument("--seeds", default="1,2,3", help="comma-separated seeds (one replay pair per seed)")
    ap.add_argument("--patterns", default=",".join(PATTERNS), help=f"comma-separated, of {', '.join(PATTERNS)}")
    ap.add_argument("--tune-budget", type=float, default=60.0, help="seconds the tuner may search per table")
    ap.add_argument("--json", type=Path, help="also write every replay's figures to this file")
    args = ap.parse_args(argv)
    rows = []
    for name in args.patterns.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            with tempfile.TemporaryDirectory(prefix="maintd-replay-") as tmp:
                row = one(Path(tmp), name, seed, args.hours, args.tune_budget)
            rows.append(row)
            print(f"{name} seed {seed}: default {row['default_measured']} meets={row['default_meets']}; tuned "
                  f"{row['tuned_measured']} meets={row['tuned_meets']} (interval {row['interval_s']:g} s)",
                  file=sys.stderr, flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str))
    print(report(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
