"""Kill ``maintd gc``, ``maintd purge`` and ``maintd run`` with SIGKILL at random storage operations, many seeds.

    .venv/bin/python scripts/crash_sweep.py --commands gc purge --seeds 50 --seed 1
    .venv/bin/python scripts/crash_sweep.py --commands run --seeds 10 --seed 1      # starts Spark each time

For each seed: a table of a shape drawn from the seed (tests/shapes.py: keys with and without partition
columns, every key type, 0 to 2 partition columns, narrow and wide schemas, 1 to 16 buckets; ``--shape fixed``
keeps the one of tests/crash/crash_helpers.py) with a known history, the command killed at a random storage
operation (before or after it applies), then checked: every version the table can still build reads as
recorded and every version retention keeps can be built; the command run again completes; once past the
grace, ``maintd gc`` leaves exactly the files the retained versions read. Prints ``N kills, M runs that ended
before the kill point, K problems`` (and the shapes drawn) and exits 1 when K > 0.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / "tests" / d) for d in ("crash", "")]

from collections import Counter  # noqa: E402 - after the path above, with the helpers it finds

import numpy as np  # noqa: E402
from crash_helpers import (  # noqa: E402
    SHAPE,
    build_template,
    kill_and_recover,
    run_command,
    storage_operations,
    write_config,
)
from shapes import Shape, random_shape  # noqa: E402

from maintd.storage.faulty import Fault  # noqa: E402


def shape_for(seed: int, drawn: bool) -> Shape:
    return random_shape(np.random.default_rng(seed), f"shape-{seed}") if drawn else SHAPE


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commands", nargs="+", default=["gc", "purge", "run"], choices=["gc", "purge", "run"])
    parser.add_argument("--seeds", type=int, default=20, help="kills per command (default 20)")
    parser.add_argument("--seed", type=int, default=1, help="first seed (default 1)")
    parser.add_argument("--shape", choices=["drawn", "fixed"], default="drawn",
                        help="a table shape drawn per seed (default), or the fixed one")
    args = parser.parse_args()
    started = time.monotonic()
    kills = survived = 0
    problems: list[str] = []
    shapes: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as base:
        for command in args.commands:
            for seed in range(args.seed, args.seed + args.seeds):
                shape = shape_for(seed, args.shape == "drawn")
                template = build_template(Path(base) / f"template-{command}-{seed}" / "t", shape)
                work = Path(base) / f"count-{command}-{seed}"
                work.mkdir()
                done = run_command(command, str(template.copy(work / "t")), write_config(work))
                if done.returncode != 0:
                    print(f"{command} does not complete on the template of {shape.describe()}:\n{done.stderr}",
                          file=sys.stderr)
                    return 2
                total = storage_operations(done)
                shapes.update({f"partition columns {len(shape.partition_by)}": 1,
                               "partition columns in the key": shape.key_includes_partition,
                               "wide (30+ columns)": len(shape.columns) >= 30,
                               **{f"key type {c.type}": 1 for c in shape.columns if c.name in shape.primary_key}})
                rng = random.Random(f"{command}-{seed}")
                fault = Fault(rng.choice(["crash", "crash_after"]), nth=rng.randint(1, total))  # type: ignore[arg-type]
                workdir = Path(base) / f"{command}-{seed}"
                workdir.mkdir()
                killed, found = kill_and_recover(template, command, workdir, [fault])
                kills += killed
                survived += not killed
                problems += [f"{shape.describe()}: {p}" for p in found]
                for p in found:
                    print(f"problem: {shape.describe()}: {p}", file=sys.stderr, flush=True)
                print(f"  {command} seed {seed} ({shape.describe()}): {fault.kind} at operation {fault.nth} of "
                      f"{total}: {'killed' if killed else 'ended first'}, {len(found)} problem(s) "
                      f"({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
    print(f"shapes: {dict(sorted((k, int(v)) for k, v in shapes.items()))}", file=sys.stderr)
    print(f"{kills} kills, {survived} runs that ended before the kill point, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
