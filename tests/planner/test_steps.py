"""Bounded steps toward a tuned policy, and where tuned knobs sit among the other sources of a policy."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from maintd.planner.policy import Policy
from maintd.planner.policy_files import deep_merge, knob_paths, load_policy_file, parse_policy
from maintd.planner.steps import bounded_step, step_value

DEFAULT = load_policy_file(None).default
#: The numeric knobs a tuner moves, with the range it may ask for.
KNOBS: dict[str, tuple[float, float, bool]] = {
    "clustering.level1.min_files": (2, 64, True),
    "clustering.level1.trigger_bytes": (2**20, 2**30, True),
    "clustering.level1.target_bytes": (2**20, 2**30, True),
    "clustering.level1.max_age_hours": (0.1, 96.0, False),
    "clustering.level2.min_files": (2, 64, True),
    "clustering.level2.target_bytes": (2**20, 2**31, True),
    "clustering.max_input_files": (2, 256, True),
    "compaction.max_delta_files": (1, 256, True),
    "compaction.delta_base_ratio": (0.01, 4.0, False),
    "compaction.max_interval_hours": (0.5, 240.0, False),
    "compaction.min_interval_hours": (0.0, 2.0, False),
    "budget.max_tasks": (1, 1000, True),
}


def _get(policy: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        policy = policy[part]
    return policy


def _nest(path: str, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = value
    for part in reversed(path.split(".")):
        out = {part: out}
    return out


@st.composite
def knob_values(draw: st.DrawFn) -> dict[str, Any]:
    chosen = draw(st.lists(st.sampled_from(sorted(KNOBS)), min_size=1, max_size=len(KNOBS), unique=True))
    out: dict[str, Any] = {}
    for path in chosen:
        low, high, integer = KNOBS[path]
        value = draw(st.integers(int(low), int(high)) if integer else st.floats(low, high, allow_nan=False))
        out = deep_merge(out, _nest(path, value))
    return out


def _valid(raw: dict[str, Any]) -> Policy | None:
    try:
        return Policy.model_validate(raw)
    except ValidationError:
        return None


@settings(max_examples=150, deadline=None)
@given(start=knob_values(), tuned=knob_values(), max_step=st.sampled_from([1.25, 1.5, 2.0, 4.0]))
def test_a_step_never_moves_a_knob_past_the_bound_and_always_leaves_a_valid_policy(
    start: dict[str, Any], tuned: dict[str, Any], max_step: float
) -> None:
    current = _valid(deep_merge(DEFAULT.model_dump(), start))
    assume(current is not None)
    assert current is not None
    step = bounded_step(current, tuned, max_step=max_step)
    after = Policy.model_validate(deep_merge(current.model_dump(), step))  # valid, or this raises
    for path in knob_paths(step):
        before, moved, wanted = _get(current.model_dump(), path), _get(after.model_dump(), path), _get(tuned, path)
        assert moved != before
        if before > 0 and wanted > 0:
            assert before / max_step - 1e-9 <= moved <= before * max_step + 1e-9, path
            assert min(before, wanted) - 1e-9 <= moved <= max(before, wanted) + 1e-9, path  # toward the tuned value
        else:
            assert moved == wanted  # no factor reaches or leaves zero


def test_a_knob_moves_by_the_bound_at_most_and_reaches_a_near_tuned_value() -> None:
    assert step_value(4, 64, 2.0) == 8 and step_value(64, 4, 2.0) == 32 and step_value(4, 6, 2.0) == 6
    assert step_value(3.0, 30.0, 1.5) == 4.5 and step_value(1, 2, 1.5) == 1  # an int the bound cannot move
    assert step_value(True, False, 2.0) is False and step_value(0.0, 2.0, 2.0) == 2.0


def test_a_step_refused_by_the_policy_rules_waits_until_the_knob_it_depends_on_has_moved() -> None:
    c = DEFAULT.clustering
    tuned = {"clustering": {"level1": {"target_bytes": c.level2.target_bytes * 2},
                            "level2": {"target_bytes": c.level2.target_bytes * 2}}}
    step = bounded_step(DEFAULT, tuned, max_step=2.0)
    assert Policy.model_validate(deep_merge(DEFAULT.model_dump(), step))
    assert step["clustering"]["level2"]["target_bytes"] == c.level2.target_bytes * 2


def test_knobs_set_as_table_properties_and_the_targets_are_never_stepped() -> None:
    tuned = {"compaction": {"max_delta_files": DEFAULT.compaction.max_delta_files * 2},
             "target": {"merge_delay_minutes": 5}}
    assert bounded_step(DEFAULT, tuned, max_step=2.0, keep=frozenset({"compaction.max_delta_files"})) == {}
    with pytest.raises(ValueError, match="max_step must be > 1"):
        bounded_step(DEFAULT, tuned, max_step=1.0)


POLICY = """
tables:
  - match: "db.*"
    overrides: {compaction: {max_delta_files: 20, delta_base_ratio: 0.5}}
"""


def test_tuned_knobs_override_the_policy_file_and_explicit_table_properties_override_them() -> None:
    pf = parse_policy(POLICY, "p.yaml")
    tuned = {"compaction": {"max_delta_files": 40, "delta_base_ratio": 0.25, "max_interval_hours": 12.0}}
    props = {"maintd.compaction.delta_base_ratio": "0.75"}
    resolved = pf.resolve(name="db.orders", properties=props, tuned=tuned)
    c = resolved.policy.compaction
    assert (c.max_delta_files, c.delta_base_ratio, c.max_interval_hours) == (40, 0.75, 12.0)
    assert resolved.tuned == ("compaction.max_delta_files", "compaction.max_interval_hours")
    assert resolved.name == "p.yaml + tables[0] (db.*) + tuned + table properties"
    untuned = pf.resolve(name="db.orders", properties=props)
    assert (untuned.policy.compaction.max_delta_files, untuned.tuned) == (20, ())


def test_tuned_knobs_that_no_longer_fit_the_policy_are_left_out_not_failed() -> None:
    pf = parse_policy(POLICY, "p.yaml")
    resolved = pf.resolve(name="db.orders", tuned={"compaction": {"max_delta_files": 0}})
    assert resolved.policy.compaction.max_delta_files == 20 and resolved.tuned == ()
    assert "tuned knobs left out" in resolved.name
