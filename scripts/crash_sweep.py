"""Kill ``maintd gc``, ``maintd purge`` and ``maintd run`` with SIGKILL at random storage operations, many seeds.

    .venv/bin/python scripts/crash_sweep.py --commands gc purge --seeds 50 --seed 1
    .venv/bin/python scripts/crash_sweep.py --commands run --seeds 10 --seed 1      # starts Spark each time

For each seed: a copy of a table with a known history (tests/crash/crash_helpers.py), the command killed
at a random storage operation (before or after it applies), then checked: every version the table can
still build reads as recorded and every version retention keeps can be built; the command run again
completes; once past the grace, ``maintd gc`` leaves exactly the files the retained versions read. Prints
``N kills, M runs that ended before the kill point, K problems`` and exits 1 when K > 0.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "crash"))

from crash_helpers import build_template, kill_and_recover, run_command, storage_operations, write_config

from maintd.storage.faulty import Fault


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commands", nargs="+", default=["gc", "purge", "run"], choices=["gc", "purge", "run"])
    parser.add_argument("--seeds", type=int, default=20, help="kills per command (default 20)")
    parser.add_argument("--seed", type=int, default=1, help="first seed (default 1)")
    args = parser.parse_args()
    started = time.monotonic()
    kills = survived = 0
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as base:
        template = build_template(Path(base) / "template" / "t")
        for command in args.commands:
            work = Path(base) / f"count-{command}"
            work.mkdir()
            done = run_command(command, str(template.copy(work / "t")), write_config(work))
            if done.returncode != 0:
                print(f"{command} does not complete on the template:\n{done.stderr}", file=sys.stderr)
                return 2
            total = storage_operations(done)
            for seed in range(args.seed, args.seed + args.seeds):
                rng = random.Random(f"{command}-{seed}")
                fault = Fault(rng.choice(["crash", "crash_after"]), nth=rng.randint(1, total))  # type: ignore[arg-type]
                workdir = Path(base) / f"{command}-{seed}"
                workdir.mkdir()
                killed, found = kill_and_recover(template, command, workdir, [fault])
                kills += killed
                survived += not killed
                problems += found
                for p in found:
                    print(f"problem: {p}", file=sys.stderr, flush=True)
                print(f"  {command} seed {seed}: {fault.kind} at operation {fault.nth} of {total}: "
                      f"{'killed' if killed else 'ended first'}, {len(found)} problem(s) "
                      f"({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
    print(f"{kills} kills, {survived} runs that ended before the kill point, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
