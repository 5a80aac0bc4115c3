"""What a rule proposes for one bucket: a task candidate, or the reason it proposes nothing."""

from __future__ import annotations

from dataclasses import dataclass

from maintd.planner.models import TaskKind
from maintd.table.log.actions import AddFile

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
