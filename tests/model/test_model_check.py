"""The model check in CI: a bounded number of random scenarios (``scripts/model_check.py`` runs any number).

Each scenario runs three writer processes, a maintainer and a reclaimer (short retention, expire commits,
pins, PURGE) on a storage that fails, stalls and loses answers at random, then checks every retained version
(pinned ones too) and the change feed between random retained versions against the model of the rows (half
the tables store prior rows), that every acknowledged commit stands at its version, and that no commit
reported as not landed is in the history (``model_harness``). ``MAINTD_MODEL_SCENARIOS`` and
``MAINTD_MODEL_SEED`` change the count and the seed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from model_harness import run

SCENARIOS = int(os.environ.get("MAINTD_MODEL_SCENARIOS", "16"))
SEED = int(os.environ.get("MAINTD_MODEL_SEED", "20260105"))


@pytest.mark.slow
def test_random_scenarios_of_writers_maintenance_and_reclamation_on_failing_storage_match_the_model(
        tmp_path: Path) -> None:
    result = run(SCENARIOS, SEED, tmp_path)
    print(result.line(), result.stats)
    assert not result.mismatches, "\n".join(result.mismatches)
    assert result.scenarios == SCENARIOS and result.versions >= 3 * SCENARIOS
    assert result.stats["acked"] > 5 * SCENARIOS, result.stats
    assert result.stats["pins"] > 0 and result.stats["expires"] > 0, result.stats  # pins and expire commits raced
