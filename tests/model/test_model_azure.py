"""The model check on Azure Blob Storage (an Azurite server started by the tests): a bounded run in CI.

The same random scenarios as on local disk and S3 (three writer processes, a maintainer and a reclaimer on
a storage that fails, stalls and loses answers at random, every retained version checked against the model,
every acknowledged commit at its version, no commit reported as not landed in the history), with the tables
in a container: commits are ``If-None-Match: *`` puts, ambiguous answers are settled by reading back.
The writers run in processes of their own and in threads, not forked: the Azure client's runtime does not
survive a fork, and a child forked after its parent used the container is refused with ForkedProcessError
(tests/table/test_fork_safety.py). ``MAINTD_MODEL_AZURE_SCENARIOS`` changes the count.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from model_harness import run

SCENARIOS = int(os.environ.get("MAINTD_MODEL_AZURE_SCENARIOS", "3"))
SEED = int(os.environ.get("MAINTD_MODEL_SEED", "20260105"))


@pytest.mark.slow
def test_random_scenarios_on_azure_match_the_model(tmp_path: Path, azure_root: str, azure_server: Any) -> None:
    result = run(SCENARIOS, SEED + 11, tmp_path, table_base=azure_root, env=azure_server.env, spark_share=0.0,
                 process_models=("spawn", "thread"))
    print(result.line(), result.stats)
    assert not result.mismatches, "\n".join(result.mismatches)
    assert result.scenarios == SCENARIOS and result.versions >= 3 * SCENARIOS
    assert result.stats["acked"] > 5 * SCENARIOS, result.stats
