"""The model check on an S3 bucket with the habits of real stores (a moto server started by the tests): a bounded
run in CI.

The random scenarios of test_model_stores.py, on a bucket that lists in no lexical order and answers 409 to
overlapping conditional writes. ``MAINTD_MODEL_S3_SCENARIOS`` changes the count.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from model_harness import run

SCENARIOS = int(os.environ.get("MAINTD_MODEL_S3_SCENARIOS", "3"))
SEED = int(os.environ.get("MAINTD_MODEL_SEED", "20260105"))


@pytest.mark.slow
def test_random_scenarios_on_an_s3_bucket_with_the_habits_of_real_stores_match_the_model(
        tmp_path: Path, s3_root: str, s3_server: Any) -> None:
    """The same check on a bucket that lists in no lexical order (the processes are not told: their storages
    notice it) and answers 409 ConditionalRequestConflict to overlapping conditional writes, whose commit PUTs
    are slowed so that they overlap."""
    s3_server.set_modes(s3_root[len("s3://"):], unordered=True, conflicts=True, slow_ms=20, slow_methods=["PUT"],
                        slow_keys="/_log/")
    scenarios = max(1, SCENARIOS - 1)
    result = run(scenarios, SEED + 11, tmp_path, table_base=s3_root, env=s3_server.env, spark_share=0.0)
    print(result.line(), result.stats)
    assert not result.mismatches, "\n".join(result.mismatches)
    # Each scenario checks versions (how many depends on its drawn shape and on what its reclaimer expired: this
    # bucket's 409s and slow commits leave fewer), and its writers land commits despite the habits.
    assert result.scenarios == scenarios and result.versions >= scenarios, result.line()
    assert result.stats["acked"] > 5 * scenarios, result.stats
