"""What the console shows of a table's targets (:mod:`maintd.service.tuning`): on the table page the targets,
the figures measured against them, their gaps and the last re-tune; on the fleet page the targets missed.

The figures are those the daemon stored on the table's tuning row, so the console shows what ``maintd status``
and ``maintd plan --explain`` show, read from the same row.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from maintd.service.console_html import age, num, pairs, stamp, table, text
from maintd.service.records import TuningRecord


def targets_section(record: TuningRecord | None, declared: Mapping[str, float], tuned_knobs: tuple[str, ...]) -> str:
    """The "Targets" section of a table page.

    Args:
        record: the table's tuning row (None: the daemon has not recorded its targets yet).
        declared: the targets its effective policy declares now (by name).
        tuned_knobs: the knobs of that policy that came from tuning (dotted paths).
    """
    if record is None and not declared:
        return "<h2>Targets</h2><p class=off>the table declares no target; the daemon does not re-tune it</p>"
    targets = dict(record.targets) if record is not None else {}
    targets.update({k: v for k, v in declared.items() if k not in targets})
    measured = record.measured if record is not None else {}
    gaps = record.gaps if record is not None else {}
    rows = [[text(name), num(value), num(measured.get(name)), _gap(gaps.get(name))]
            for name, value in targets.items()]
    when = "" if record is None or record.measured_at is None else f" (measured {stamp(record.measured_at)})"
    return (f"<h2>Targets{text(when)}</h2>"
            + table(["target (ceiling)", "value", "measured (p95)", "gap"], rows, empty="none")
            + "<h2>Last re-tune</h2>" + _last_retune(record, tuned_knobs))


def _gap(gap: float | None) -> str:
    if gap is None:
        return "<span class=off>not measured yet</span>"
    shown = text(f"{gap:+.0%}")
    return f"<span class=bad>{shown} missed</span>" if gap > 1e-9 else f"<span class=ok>{shown} met</span>"


def _last_retune(record: TuningRecord | None, tuned_knobs: tuple[str, ...]) -> str:
    if record is None or (record.tuned_at is None and record.error is None):
        return "<p class=off>not re-tuned yet</p>"
    facts: dict[str, object] = {
        "re-tuned": stamp(record.tuned_at) if record.tuned_at else "never",
        "reason": record.reason or "",
        "applied knobs": json.dumps(record.overrides or {}, sort_keys=True),
        "knobs in effect from tuning": ", ".join(tuned_knobs) or "none (policy file and properties)",
        "check interval": "" if record.interval_seconds is None else age(record.interval_seconds),
        "predicted": _figures(record.predicted),
        "measured then": _figures(record.tuned_measured),
    }
    if record.error:
        facts["last re-tune failed"] = f"{stamp(record.error_at)}: {record.error}"
    return pairs(facts)


def _figures(figures: Mapping[str, Any] | None) -> str:
    return ", ".join(f"{k} {v:.4g}" if isinstance(v, int | float) else f"{k} {v}"
                     for k, v in (figures or {}).items())


def missed_cell(missed: list[str] | None) -> str:
    """The fleet page's "targets missed" cell: empty for a table without targets."""
    if missed is None:
        return ""
    if not missed:
        return "<span class=ok>none</span>"
    return f"<span class=bad>{text(', '.join(missed))}</span>"


__all__ = ["missed_cell", "targets_section"]
