"""The model check on object stores (S3 on a moto server, Azure Blob Storage on Azurite): a bounded run in CI.

The same random scenarios as on local disk (tables of random shapes; three writers, a maintainer and a reclaimer on
a storage that fails, stalls and loses answers at random, every retained version checked against the model, every
acknowledged commit at its version, no commit reported as not landed in the history), with the tables in a bucket
or a container: commits are conditional puts, ambiguous answers are settled by reading back. On S3 the writers run
in each process model: processes of their own, threads, children forked from a process that used the bucket. On
Azure not forked: the Azure client's runtime does not survive a fork, and a child forked after its parent used the
container is refused with ForkedProcessError (tests/table/test_table_fork_safety.py).
``MAINTD_MODEL_S3_SCENARIOS`` and ``MAINTD_MODEL_AZURE_SCENARIOS`` change the counts; the check on a bucket with
the habits of real stores is in test_model_s3.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from model_harness import run
from model_ops import PROCESS_MODELS
from stores import TableStore

SEED = int(os.environ.get("MAINTD_MODEL_SEED", "20260105"))
SCENARIOS = {"s3": int(os.environ.get("MAINTD_MODEL_S3_SCENARIOS", "3")),
             "azure": int(os.environ.get("MAINTD_MODEL_AZURE_SCENARIOS", "3"))}
SEEDS = {"s3": SEED + 7, "azure": SEED + 11}
MODELS = {"s3": PROCESS_MODELS, "azure": ("spawn", "thread")}


@pytest.mark.slow
@pytest.mark.stores("s3", "azure")  # on local disk: test_model_check.py
def test_random_scenarios_match_the_model(tmp_path: Path, table_store: TableStore) -> None:
    scenarios = SCENARIOS[table_store.name]
    result = run(scenarios, SEEDS[table_store.name], tmp_path, table_base=table_store.root, env=table_store.env,
                 spark_share=0.0, process_models=MODELS[table_store.name])
    print(result.line(), result.stats)
    assert not result.mismatches, "\n".join(result.mismatches)
    assert result.scenarios == scenarios and result.versions >= 3 * scenarios
    assert result.stats["acked"] > 5 * scenarios, result.stats
    if scenarios >= 3:  # writers in each process model the store allows
        assert all(result.stats.get(f"process model {m}") for m in MODELS[table_store.name]), result.stats
