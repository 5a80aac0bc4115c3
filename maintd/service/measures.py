"""The figures a table's targets are measured on, from what the daemon records.

- ``read_files_per_bucket``: the p95 over the window of the files a reader opens in the table's worst bucket
  (the layout's ``read_amplification``), over the regular samples of the table's layout.
- ``merge_delay_minutes``: the p95 over the window of the age of the table's oldest level-0 file at each
  sample (0 when it has none): how long fresh data waits before clustering merges it.
- ``write_amplification``: bytes maintenance wrote (outputs of its commits, prior-rows files included)
  per byte the writers wrote, both read from the table's log over the learning window the tuner uses. Taken
  from the log, not from recorded runs, so that both sides count the same commits over the same window,
  whichever replica or ``maintd run`` committed them; ``None`` while writers wrote nothing in the window.

Samples are taken at a fixed interval whether the table changed or not, so a plain percentile over them
weighs every moment of the window alike (a layout stored only when a check planned would over-weigh busy
hours).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from maintd.simulate.simulator import Learned

Sample = tuple[datetime, float | None, float | None]
"""One layout sample: its time, the read amplification, the oldest level-0 age in minutes."""


def p95(values: Sequence[float]) -> float | None:
    """The nearest-rank 95th percentile (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    return float(ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)])


def measured_from_samples(samples: Sequence[Sample]) -> dict[str, float]:
    """``read_files_per_bucket`` and ``merge_delay_minutes`` from a window's samples (those with a value)."""
    out: dict[str, float] = {}
    reads = p95([r for _, r, _ in samples if r is not None])
    if reads is not None:
        out["read_files_per_bucket"] = reads
    ages = p95([max(0.0, a) for _, _, a in samples if a is not None])
    if ages is not None:
        out["merge_delay_minutes"] = ages
    return out


def write_amplification(learned: Learned) -> float | None:
    """Maintenance bytes written per writer byte over the learned window (None: the writers wrote nothing)."""
    pattern = learned.pattern
    written = sum(c.bytes for c in pattern.commits)
    if written <= 0:
        return None
    rewritten = sum(sum(f.bytes for f in m.outputs) + m.prior_bytes for m in pattern.merges)
    return rewritten / written


__all__ = ["Sample", "measured_from_samples", "p95", "write_amplification"]
