"""The measures targets are checked against, from one simulation of a policy (:mod:`maintd.planner.targets`).

Per policy and maintenance interval: the p95 over simulated time of the files a reader opens in the fullest
bucket (the layout's read amplification, as the daemon measures it). The p95 over time of the age of the
oldest level-0 file; the write amplification (bytes maintenance wrote / bytes writers wrote); and the bytes
maintenance rewrote, the cost tuning minimises. A run can be cut short once it has rewritten more than a bound
(a cheaper policy that meets the targets is already known), or at a deadline: the search throws such runs
away, so pruning never changes what it chooses among the runs it finished.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from maintd.planner import Policy
from maintd.simulate.engine import MAINTAIN, RECLAIM, WRITE, Exposure, SimTable, events
from maintd.simulate.pattern import HOUR_MS
from maintd.simulate.schedule import Schedule
from maintd.simulate.simulator import Learned

BYTES_REWRITTEN = "bytes_rewritten"


@dataclass(frozen=True)
class Measures:
    """What one simulated policy did over the whole horizon (see the module docstring for each figure)."""

    read_files_per_bucket: float
    merge_delay_minutes: float
    write_amplification: float
    bytes_rewritten: int
    bytes_written: int
    writer_bytes: int
    runs: int
    """Maintenance passes that planned work (the tie-break: fewer runs, fewer jobs)."""
    passes: int

    def as_dict(self) -> dict[str, float]:
        """Keyed by the target names, plus ``bytes_rewritten``."""
        return {"read_files_per_bucket": self.read_files_per_bucket,
                "merge_delay_minutes": self.merge_delay_minutes,
                "write_amplification": self.write_amplification, BYTES_REWRITTEN: float(self.bytes_rewritten)}


class Cut(Exception):
    """A run stopped early: over the byte bound, or past the deadline."""


def measure(learned: Learned, policy: Policy, schedule: Schedule, *, start_ms: int, end_ms: int,
            max_rewritten: int | None = None, deadline: float | None = None) -> Measures:
    """Simulate ``policy`` over ``[start_ms, end_ms]`` and measure it.

    Raises:
        Cut: it rewrote more than ``max_rewritten`` bytes, or ``time.monotonic()`` passed ``deadline``.
    """
    sim = SimTable(learned.start, learned.pattern.commit_times)
    sim.advance(start_ms)
    sim.exposure = Exposure()
    passes = runs = 0
    uri = learned.pattern.table_uri
    for t, kind, commit in events(learned.pattern, schedule, start_ms, end_ms, end_ms - start_ms or HOUR_MS):
        if kind == WRITE and commit is not None:
            sim.write(t, commit)
        elif kind == MAINTAIN:
            passes += 1
            runs += sim.maintain(t, policy, sizes=learned.sizes, table_uri=uri, policy_name="tune") > 0
            if max_rewritten is not None and sim.maintenance_read > max_rewritten:
                raise Cut("rewrote more than the cheapest policy found")
            if deadline is not None and passes % 64 == 0 and time.monotonic() > deadline:
                raise Cut("out of time")
        elif kind == RECLAIM:
            sim.reclaim(t)
    sim.advance(end_ms)
    wa = sim.maintenance_written / sim.writer_bytes if sim.writer_bytes else 0.0
    return Measures(read_files_per_bucket=sim.exposure.files_p95(),
                    merge_delay_minutes=sim.exposure.age_p95_minutes(), write_amplification=round(wa, 4),
                    bytes_rewritten=sim.maintenance_read, bytes_written=sim.maintenance_written,
                    writer_bytes=sim.writer_bytes, runs=runs, passes=passes)


__all__ = ["BYTES_REWRITTEN", "Cut", "Measures", "measure"]
