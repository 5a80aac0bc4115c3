"""What a rule proposes for one bucket: a task candidate, or the reason it proposes nothing."""

from __future__ import annotations

from dataclasses import dataclass

from maintd.planner.models import TaskKind
from maintd.table.actions import AddFile

MiB = 1024 * 1024


@dataclass(frozen=True)
class Candidate:
    """A proposed task before ranking and the budget cut."""

    kind: TaskKind
    target_level: int | None
    inputs: tuple[AddFile, ...]
    rule: str
    reason: str
    expected_output_bytes: int
    stale_bytes: int = 0

    @property
    def input_bytes(self) -> int:
        return sum(f.bytes for f in self.inputs)

    @property
    def input_rows(self) -> int:
        return sum(f.rows for f in self.inputs)


@dataclass(frozen=True)
class Skip:
    """Why a rule proposed nothing: the deciding knob and a sentence for ``--explain``."""

    rule: str
    message: str


def fmt_bytes(n: float) -> str:
    """``1536`` -> ``1.5 KiB``: sizes in explanations."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def fmt_hours(h: float) -> str:
    """Durations in explanations: ``0.5`` -> ``30 min``, ``2`` -> ``2 h``, ``49`` -> ``2.0 d``."""
    if h < 1:
        return f"{h * 60:.0f} min"
    if h < 48:
        return f"{h:.1f} h".replace(".0 h", " h")
    return f"{h / 24:.1f} d"
