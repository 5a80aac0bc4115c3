"""Bounded steps toward a tuned policy: the daemon never applies a tuner's answer in one jump.

A tuner's answer is only as good as the writes it learned from; a table whose writers changed overnight
would swing between extremes if each answer were applied whole. So each re-tune moves every numeric knob
at most ``max_step`` times (up or down) toward the tuned value, and the table converges over a few
re-tunes while its measured figures show whether the direction holds.

Knobs that no factor can move take the tuned value at once: switches (``enabled``), and a knob that is or
becomes zero (``compaction.min_interval_hours: 0``). A step that would make the policy invalid (level-1
files larger than level-2 files, say) leaves the knobs that break it where they are, so the applied policy
is always valid.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from maintd.planner.policy import Policy


def _leaves(nested: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    out: list[tuple[tuple[str, ...], Any]] = []
    for k, v in nested.items():
        out.extend(_leaves(v, (*prefix, k)) if isinstance(v, Mapping) else [((*prefix, k), v)])
    return out


def _get(nested: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = nested
    for p in path:
        if not isinstance(node, Mapping) or p not in node:
            return None
        node = node[p]
    return node


def _set(nested: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = nested
    for p in path[:-1]:
        node = node.setdefault(p, {})
    node[path[-1]] = value


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else v
    return out


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def step_value(current: Any, tuned: Any, max_step: float) -> Any:
    """``tuned``, or as near to it as one step of at most ``max_step`` times from ``current`` goes.

    Integers stay integers (rounded inward, so the bound holds); non-numbers and zeros take ``tuned``.
    """
    if not (_is_number(current) and _is_number(tuned)) or current <= 0 or tuned <= 0:
        return tuned
    low, high = current / max_step, current * max_step
    if isinstance(current, int) and isinstance(tuned, int):
        low_i, high_i = math.ceil(low), math.floor(high)
        return min(max(tuned, low_i), high_i) if low_i <= high_i else current
    return float(min(max(float(tuned), low), high))


def step_interval(current: float, tuned: float, max_step: float) -> float:
    """The check interval one step toward ``tuned`` (seconds)."""
    return float(step_value(float(current), float(tuned), max_step))


def _valid(raw: Mapping[str, Any]) -> bool:
    try:
        Policy.model_validate(raw)
    except ValidationError:
        return False
    return True


def bounded_step(current: Policy, tuned: Mapping[str, Any], *, max_step: float,
                 keep: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The knobs to change in ``current`` (nested, only those that move): one bounded step toward ``tuned``.

    Args:
        current: the policy in effect (with the knobs applied by earlier steps).
        tuned: the tuner's nested knobs (those differing from ``current``).
        max_step: the factor (> 1) a numeric knob moves at most.
        keep: dotted knob paths never changed (an operator set them as table properties).

    Returns:
        Nested knobs; ``current`` merged with them is a valid policy.
    """
    if max_step <= 1:
        raise ValueError(f"max_step must be > 1 (got {max_step}); it is the factor one re-tune moves a knob at most")
    base = current.model_dump()
    wanted: list[tuple[tuple[str, ...], Any]] = []
    for path, value in _leaves(tuned):
        now = _get(base, path)
        if ".".join(path) in keep or path[0] == "target" or now is None or isinstance(now, Mapping):
            continue
        moved = step_value(now, value, max_step)
        if moved != now:
            wanted.append((path, moved))
    applied: dict[str, Any] = {}
    changed = True
    while changed:  # a knob refused because another had not moved yet may fit once that one has
        changed = False
        for path, value in list(wanted):
            trial = copy.deepcopy(applied)
            _set(trial, path, value)
            if _valid(_merge(base, trial)):
                applied = trial
                wanted.remove((path, value))
                changed = True
    return applied


__all__ = ["bounded_step", "step_interval", "step_value"]
