"""Sizes and durations as people read them, in plans, explanations and command output.

A leaf module (standard library only), so that commands printing a size need not import the planner.
"""

from __future__ import annotations


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
