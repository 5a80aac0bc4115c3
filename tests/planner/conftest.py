"""Planner test fixtures (helpers live in ``planner_helpers``, a name no other test directory uses)."""

from __future__ import annotations

import pytest
from planner_helpers import policy

from maintd.planner import Policy


@pytest.fixture
def quiet() -> Policy:
    """A policy where only the knobs a test sets can fire: long ages, no retention pressure."""
    return policy(compaction={"retention_pressure": False, "max_interval_hours": 10_000,
                                                "max_delta_files": 10_000},
                  clustering={"level1": {"max_age_hours": 10_000}, "level2": {"max_age_hours": 10_000}},
                  ranking={"age_weight_per_day": 0})
