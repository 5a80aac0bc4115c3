"""Run the model check (tests/model/model_harness.py) for any number of scenarios with a seed.

    .venv/bin/python scripts/model_check.py --scenarios 1000 --seed 1

prints ``N scenarios, M versions checked, K mismatches`` (and each mismatch on stderr, with the shape,
engine and process model of its scenario) and exits 1 when K > 0; on stderr, the outcomes counted and the
draws: how many scenarios had each trait of shape (partition columns in the key, each key type, ...), each
maintenance engine and each process model. Each scenario draws a table shape, runs writers, maintd's own
maintenance (in process or on Spark) and reclamation (short retention, PURGE) on a storage that fails, stalls
and loses answers at random, and in a share of them one writer adds columns to the schema midway (counted as
``schema evolution`` among the draws), in another the table is on named table features, created so or upgraded
midway by a writer (``table features``); see the harness's docstring.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from loguru import logger

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / "tests" / d) for d in ("model", "")]

from model_harness import Result, run  # noqa: E402 - found through the path above


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", type=int, default=100, help="how many scenarios (default 100)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the first scenario (default 1)")
    parser.add_argument("--dir", type=Path, default=None, help="where the tables go (default: a temporary dir)")
    parser.add_argument("--spark-share", type=float, default=None,
                        help="share of scenarios whose maintenance is forced onto Spark (default: the harness's)")
    parser.add_argument("--evolution-share", type=float, default=None,
                        help="share of scenarios in which a writer adds columns midway (default: the harness's)")
    parser.add_argument("--features-share", type=float, default=None,
                        help="share of scenarios whose table is on named table features (default: the harness's)")
    parser.add_argument("--quiet", action="store_true", help="no progress line on stderr")
    args = parser.parse_args()
    logger.remove()  # the reclamation log of every scenario's final check would drown the progress lines
    started = time.monotonic()
    shown = 0

    def progress(r: Result) -> None:
        nonlocal shown
        for mismatch in r.mismatches[shown:]:
            print(f"mismatch: {mismatch}", file=sys.stderr, flush=True)
        shown = len(r.mismatches)
        if not args.quiet:
            print(f"  {r.line()} ({time.monotonic() - started:.0f} s) {r.stats}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(dir=args.dir) as base:
        extra = {} if args.spark_share is None else {"spark_share": args.spark_share}
        if args.evolution_share is not None:
            extra["evolution_share"] = args.evolution_share
        if args.features_share is not None:
            extra["features_share"] = args.features_share
        result = run(args.scenarios, args.seed, Path(base), progress=progress, **extra)
    print(f"outcomes and draws: {dict(sorted(result.stats.items()))}", file=sys.stderr)
    print(f"wall time: {time.monotonic() - started:.0f} s", file=sys.stderr)
    print(result.line())
    return 1 if result.mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
