"""The daemon's target keeper with the real tuner: a table written by a streaming writer and maintained by the
packaged default policy misses its targets; one re-tune learns its writes, searches with the simulator and
records a bounded step towards a policy that the tuner predicts meets them."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from simulate.sim_helpers import write_and_maintain

from maintd.planner.policy_files import load_policy_file
from maintd.service.store import StateStore
from maintd.service.tuning import TargetKeeper
from maintd.settings import Settings
from maintd.table import Table

pytestmark = pytest.mark.slow


def test_one_re_tune_with_the_real_tuner_steps_towards_a_policy_meeting_the_targets(tmp_path: Path) -> None:
    # Eight hours of writes every 10 minutes, maintained every 30 minutes by the default policy: level-0 files
    # wait for the hour-old trigger, so a 20-minute merge delay is missed.
    done = write_and_maintain(tmp_path, hours=8, policy_text="default: {}\n", buckets=2,
                              properties={"maintd.target.merge_delay_minutes": "20"})
    store = StateStore(f"sqlite:///{tmp_path / 'maintd.db'}")
    try:
        store.register_tables([done.uri])
        store.set_targets({done.uri: {"merge_delay_minutes": 20.0}})
        settings = Settings(tuning={"days": 1, "learn_hours": 8, "time_budget_seconds": 10, "max_step": 2},
                            scheduler={"maintenance_interval_seconds": 1800})
        keeper = TargetKeeper(settings, store, load_policy_file(None))
        now = done.end + timedelta(minutes=1)
        assert keeper.retune_due([done.uri], now=now) == 1
        [record] = store.tuning_records([done.uri]).values()
        assert record.error is None and record.tuned_at is not None
        assert record.reason and "moved" in record.reason
        assert record.predicted["merge_delay_minutes"] <= 20.0, record.reason
        # the step is bounded: each knob moved at most 2x from the default, and the result is a valid policy
        resolved = load_policy_file(None).resolve(uri=done.uri, properties=Table.open(done.uri).snapshot()
                                                  .metadata.properties, tuned=record.overrides)
        assert resolved.tuned, "the applied knobs take effect in the table's policy"
        default = load_policy_file(None).default
        l1, d1 = resolved.policy.clustering.level1, default.clustering.level1
        assert d1.max_age_hours / 2 <= l1.max_age_hours <= d1.max_age_hours * 2
        assert d1.min_files / 2 <= l1.min_files <= d1.min_files * 2
        assert record.interval_seconds is not None and 900 <= record.interval_seconds <= 3600
        # not due again before tuning.interval_hours
        assert keeper.retune_due([done.uri], now=now + timedelta(hours=1)) == 0
    finally:
        store.close()
