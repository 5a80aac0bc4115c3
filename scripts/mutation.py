#!/usr/bin/env python3
"""Mutation testing of the safety-critical code with mutmut (configured in pyproject.toml, ``[tool.mutmut]``).

Not part of CI: a full run takes hours on two cores. It runs module by module, niced, and prints the score
of each module (killed / mutants tried) and its surviving mutants; docs/testing.md says how to read them.

    python scripts/mutation.py                          # every module of the selection, one after the other
    python scripts/mutation.py maintd/reclaim/files.py  # one module (or several)
    python scripts/mutation.py --report                 # only the scores of what was run so far
    python scripts/mutation.py --show                   # also the diff of every survivor

Results accumulate in ``mutants/`` (git-ignored): a second run only tries the mutants not tried yet, and
mutants of functions whose code changed. ``rm -rf mutants`` starts afresh. Each mutant runs only the
tests that exercise the function it changes (mutmut records which while it runs the selection once).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# mutmut's own entry point, run by this interpreter: the ``mutmut`` script's first line may name another
# environment's Python (a copied virtualenv), which would import another checkout's packages.
MUTMUT = [sys.executable, "-c", "import sys; from mutmut.__main__ import cli; sys.exit(cli())"]

MODULES = [
    # smallest and most critical first
    "maintd/reclaim/retention.py",
    "maintd/planner/compaction.py",
    "maintd/table/log/snapshot.py",
    "maintd/reclaim/purge.py",
    "maintd/reclaim/files.py",
    "maintd/table/log/conflicts.py",
    "maintd/planner/clustering.py",
    "maintd/execution/commit.py",
    "maintd/table/transaction.py",
    "maintd/reclaim/engine.py",
    "maintd/table/read/reader.py",
    "maintd/table/read/feed/diff.py",
    "maintd/table/log/tablelog.py",
]

KILLED = {1, 3, 37}
SURVIVED = {0}
TIMEOUT = {36, -24, 24, 152, 255}
NOT_RUN = {None, 2}


def module_glob(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".") + ".*"


def scores(path: str) -> dict[str, object]:
    meta = ROOT / "mutants" / f"{path}.meta"
    if not meta.exists():
        return {"module": path, "total": 0, "tried": 0, "killed": 0, "survived": [], "timeout": 0, "no_tests": []}
    codes: dict[str, int | None] = json.loads(meta.read_text()).get("exit_code_by_key", {})
    tried = {k: v for k, v in codes.items() if v not in NOT_RUN}
    return {
        "module": path,
        "total": len(codes),
        "tried": len(tried),
        "killed": sum(v in KILLED for v in tried.values()),
        "timeout": sum(v in TIMEOUT for v in tried.values()),  # a mutant that hangs the tests is caught too
        "survived": sorted(k for k, v in tried.items() if v in SURVIVED),
        "no_tests": sorted(k for k, v in tried.items() if v in (5, 33)),
    }


def report(paths: list[str], show: bool) -> None:
    print(f"{'module':36} {'killed':>7} {'tried':>6} {'total':>6} {'score':>7}")
    for path in paths:
        s = scores(path)
        caught = int(s["killed"]) + int(s["timeout"])  # type: ignore[call-overload]
        tried = int(s["tried"])  # type: ignore[call-overload]
        pct = f"{100 * caught / tried:.1f}%" if tried else "-"
        print(f"{path:36} {caught:>7} {tried:>6} {s['total']:>6} {pct:>7}")
        for name in [*s["survived"], *s["no_tests"]]:  # type: ignore[misc]
            print(f"    survived: {name}")
            if show:
                subprocess.run([*MUTMUT, "show", name], cwd=ROOT, check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modules", nargs="*", help="files to mutate (default: all of the selection)")
    parser.add_argument("--children", type=int, default=1, help="mutants run at once (default 1)")
    parser.add_argument("--report", action="store_true", help="print the scores so far, run nothing")
    parser.add_argument("--show", action="store_true", help="print the diff of every surviving mutant")
    args = parser.parse_args()
    paths = args.modules or MODULES
    unknown = [p for p in paths if p not in MODULES]
    if unknown:
        parser.error(f"not in the mutation selection: {', '.join(unknown)} (choose from {', '.join(MODULES)})")
    env = os.environ | {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    if not args.report:
        for path in paths:
            print(f"== mutating {path}", flush=True)
            cmd = ["nice", "-n", "10", *MUTMUT, "run", "--max-children", str(args.children), module_glob(path)]
            done = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, check=False)
            if done.returncode != 0:
                print(f"mutmut failed on {path} (exit {done.returncode}); see `mutmut run` output", file=sys.stderr)
                return done.returncode
    report(paths, args.show)
    return 0


if __name__ == "__main__":
    sys.exit(main())
