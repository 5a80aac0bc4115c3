"""``python crashing_cli.py PLAN_JSON ARGS...``: the ``maintd`` command line with a fault plan installed.

Every local storage the command opens goes through the plan (:mod:`maintd.storage.faulty`), so a ``crash``
rule kills the process with SIGKILL at a named step or at the n-th storage operation. When the command
ends by itself, the number of storage operations it made is printed on stderr (``storage operations: N``),
which is how a sweep picks a random point to kill a later run at.
"""

from __future__ import annotations

import sys

from maintd.storage.faulty import FaultPlan

if __name__ == "__main__":
    plan = FaultPlan.from_json(sys.argv[1])
    plan.install()
    from maintd.cli import main

    try:
        main(sys.argv[2:])
    finally:
        sys.stderr.write(f"storage operations: {sum(plan.calls.values())}\n")
