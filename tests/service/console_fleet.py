"""A small fleet of real tables with real runs recorded in a state store, for the console's tests.

The runs are what the daemon records: :class:`~maintd.service.jobs.TableJobs` maintains each table (rewrites in
local threads, no Spark) and its result is written to the store the way the daemon writes it (start, decisions,
finish with metrics, plan and layout). One table's runs fail three times in a row; one table's name and a
property hold markup (the property is no policy key, so its run fails with an error quoting it), and it holds
a pin. The healthy table declares targets and was re-tuned (its tuning row as the daemon writes it): one
target missed, one met, a tuned knob, and a reason holding markup.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from maintd import Table
from maintd.service.jobs import TableJobs
from maintd.service.metrics import Metrics
from maintd.service.records import RunKind, RunStatus
from maintd.service.store import StateStore
from maintd.settings import Settings

from .warehouse import Model, write

POLICY = """
default:
  clustering:
    level1:
      min_files: 4
  compaction:
    max_delta_files: 6
    min_interval_hours: 0
"""
HOSTILE_NAME = "<script>alert('name')</script>"
HOSTILE_PROPERTY = "<img src=x onerror=alert('prop')>"
CANARY = "console-canary-7f3a9c1e5b"
HOSTILE_REASON = "cheapest meeting <em>every</em> target; moved compaction.max_delta_files"


@dataclass
class Fleet:
    settings: Settings
    store: StateStore
    healthy: str
    failing: str
    hostile: str
    run_id: int
    """A maintenance run of ``healthy`` that committed tasks."""


def settings_for(tmp_path: Path, **http: object) -> Settings:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    return Settings.model_validate({
        "state_dir": str(tmp_path / "state"),
        "warehouse": {"roots": [str(tmp_path / "wh")],
                      "prefix_storage_options": {"s3://canary/": {"aws_secret_access_key": CANARY}}},
        "store": {"url": f"sqlite:///{tmp_path / 'maintd.db'}", "lease_duration_seconds": 30,
                  "lease_renew_interval_seconds": 5},
        "policy": {"path": str(policy)},
        "http": {"host": "127.0.0.1", **http},
    })


def make_fleet(tmp_path: Path, store: StateStore, settings: Settings) -> Fleet:
    root = tmp_path / "wh"
    healthy = _table(root / "orders", seed=1)
    hostile = _table(root / "weird", seed=2, name=HOSTILE_NAME, properties={"maintd.note": HOSTILE_PROPERTY})
    failing = _table(root / "broken", seed=3)
    hostile.pin(hostile.version, timedelta(hours=1), reason="a reader's job")
    jobs = TableJobs(settings, store, Metrics(), holder="replica-a")
    store.acquire_leases("replica-a", [healthy.uri, hostile.uri], 60, 10)  # a run commits only under its lease
    run_id = _record(store, healthy.uri, jobs)
    _record(store, hostile.uri, jobs)
    store.register_table(failing.uri, name="broken")
    for _ in range(3):
        run = store.start_run(failing.uri, RunKind.MAINTENANCE, holder="replica-a")
        store.finish_run(run, RunStatus.FAILED, error="PolicyError: no rule fits <b>bold</b>")
    _tune(store, healthy.uri)
    store.heartbeat("replica-a", 60)
    store.record_root_scan(str(root), tables_found=3, holder="replica-a")
    store.record_root_scan("s3://gone-bucket/wh", error="NoSuchBucket: gone-bucket", error_type="StorageError",
                           holder="replica-a")
    return Fleet(settings, store, healthy.uri, failing.uri, hostile.uri, run_id)


def _tune(store: StateStore, uri: str) -> None:
    """Targets, measured figures and a re-tune of ``uri``, as the daemon records them (maintd.service.tuning)."""
    store.set_targets({uri: {"read_files_per_bucket": 4.0, "merge_delay_minutes": 30.0}})
    store.record_measured({uri: ({"read_files_per_bucket": 6.0, "merge_delay_minutes": 12.0},
                                 {"read_files_per_bucket": 0.5, "merge_delay_minutes": -0.6})})
    store.record_tuning(uri, overrides={"compaction": {"max_delta_files": 9}}, interval_seconds=600.0,
                        reason=HOSTILE_REASON, predicted={"read_files_per_bucket": 3.5},
                        measured={"read_files_per_bucket": 6.0})


def _table(uri: Path, *, seed: int, name: str | None = None, properties: dict[str, str] | None = None) -> Table:
    table = Table.create(str(uri), "id:int64!,name:string,amount:float64", primary_key="id", buckets=2,
                         name=name or uri.name, properties=properties or {})
    write(table, Model(), commits=8, seed=seed)
    return table


def _record(store: StateStore, uri: str, jobs: TableJobs) -> int:
    """Maintain ``uri`` and record the run as the daemon does."""
    store.register_table(uri, name=Table.open(uri).snapshot().metadata.name)
    result = jobs.maintain(uri)
    run = store.start_run(uri, RunKind.MAINTENANCE, holder="replica-a")
    store.record_decisions(run, result.decisions)
    store.finish_run(run, result.status, metrics=result.metrics, plan=result.plan, layout=result.layout,
                     error=result.error)
    return run
