"""The daemon keeps targets: it measures each table that declares targets and re-tunes it in bounded steps.

Every ``tuning.measure_interval_seconds`` the replica that owns a table (:mod:`maintd.service.replicas`):

1. records which of its tables declare targets (the policies its checks resolved; a table that declares
   none has no tuning row, is never sampled and never re-tuned);
2. samples the layout measures of every table with targets (one statement) and measures each of its own
   over ``tuning.window_hours`` (:mod:`maintd.service.measures`), storing the figures and the gaps the
   ``maintd_table_target*`` gauges serve;
3. re-tunes the tables whose last re-tune is ``tuning.interval_hours`` old: learns their recent writes,
   asks the tuner for the cheapest policy that meets the targets, and applies one bounded step toward it
   (:mod:`maintd.planner.steps`), stored with the time, the reason, the targets, the predicted and the
   measured figures. The daemon plans the table with these knobs over its policy file's, under its explicit
   ``maintd.*`` table properties.

The tuner is injected (a :class:`Tuner`; by default ``maintd.simulate.tune.tune``, imported when first
used, with one worker process per usable CPU), so this loop is tested without its search. A search its time
budget cut says so in its reason, which the row records. A re-tune that fails is logged and recorded on the table's
row and the knobs applied before stay: it never stops the daemon or another table.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from loguru import logger

from maintd.errors import TuningError
from maintd.planner.policy import Policy
from maintd.planner.policy_files import PolicyFile, deep_merge, knob_paths, property_overrides
from maintd.planner.steps import bounded_step, step_interval
from maintd.planner.targets import Targets
from maintd.service.measures import measured_from_samples, write_amplification
from maintd.service.records import TuningRecord
from maintd.service.store import StateStore
from maintd.settings import Settings

if TYPE_CHECKING:
    from maintd.simulate.simulator import Learned


class TuneOutcome(Protocol):
    """What the tuner returns (``maintd.simulate.tune.TuneResult``), as far as the daemon reads it."""

    @property
    def policy(self) -> Policy: ...
    @property
    def overrides(self) -> dict[str, Any]: ...
    @property
    def interval_seconds(self) -> float: ...
    @property
    def meets(self) -> bool: ...
    @property
    def reason(self) -> str: ...
    @property
    def predicted(self) -> dict[str, float]: ...


class Tuner(Protocol):
    """``maintd.simulate.tune.tune``: the cheapest policy meeting ``targets`` for the learned writes."""

    def __call__(self, learned: Learned, targets: Targets, current: Policy, *, days: int, interval_seconds: float,
                 now_ms: int, time_budget_s: float) -> TuneOutcome: ...


Learner = Callable[[Any, float], "Learned"]
"""Learns a table's recent writes: ``(table, hours) -> Learned``."""


def default_tuner() -> Tuner:
    """The tuner of ``maintd.simulate.tune`` (imported when first used: the daemon of a fleet without targets
    never loads the simulator). It simulates candidates one after another in this process: the daemon runs
    threads (scheduler, leases, HTTP, the Spark driver's gateway), and a child forked beside them could inherit a
    lock another thread held; the command line's ``maintd tune``, a process of its own, forks workers."""
    from maintd.simulate.tune import tune

    tuner: Tuner = functools.partial(tune, workers=1)
    return tuner


def default_learner(table: Any, hours: float) -> Learned:
    from maintd.simulate.simulator import learn

    return learn(table, hours=hours)


class TargetKeeper:
    """Measures and re-tunes the tables with targets a replica owns (see the module docstring).

    Args:
        settings: the daemon's settings (``tuning``, ``scheduler``).
        store: the state store.
        policy_file: the daemon's policy file.
        tuner: the tuner (None: :func:`default_tuner`, imported at the first re-tune).
        learner: learns a table's writes (None: :func:`maintd.simulate.simulator.learn`).
        open_table: opens a table by URI (None: :meth:`maintd.table.Table.open`).
    """

    def __init__(self, settings: Settings, store: StateStore, policy_file: PolicyFile, *, tuner: Tuner | None = None,
                 learner: Learner | None = None, open_table: Callable[[str], Any] | None = None) -> None:
        self.settings, self.store, self.policy_file = settings, store, policy_file
        self._tuner = tuner
        self.learner = learner or default_learner
        self.open_table = open_table or _open_table

    @property
    def tuner(self) -> Tuner:
        if self._tuner is None:
            self._tuner = default_tuner()
        return self._tuner

    def keep(self, owned: Iterable[str], declared: Mapping[str, Targets]) -> int:
        """One pass over the ``owned`` tables: record targets, measure, re-tune those due; returns re-tunes."""
        owned = list(owned)
        mine = {uri: t for uri, t in declared.items() if uri in set(owned)}
        with_targets = {uri: {str(k): v for k, v in t.declared().items()} for uri, t in mine.items() if t.any()}
        without = [uri for uri, t in mine.items() if not t.any()]
        self.store.set_targets(with_targets, without)
        self.measure(owned)
        return self.retune_due(owned)

    def measure(self, owned: Iterable[str], *, now: datetime | None = None) -> dict[str, dict[str, float]]:
        """Sample the layouts of the tables with targets, then measure the ``owned`` ones over the window."""
        t = self.settings.tuning
        now = now or self.store.db_now()
        step = t.measure_interval_seconds
        at = datetime.fromtimestamp(now.timestamp() // step * step, UTC)  # replicas agree on the sample's time
        self.store.sample_layouts(at)
        self.store.prune_samples(now - timedelta(hours=t.window_hours))
        records = self.store.tuning_records(owned)
        samples = self.store.layout_samples(records, now - timedelta(hours=t.window_hours))
        out: dict[str, tuple[dict[str, float], dict[str, float]]] = {}
        for uri, record in records.items():
            measured = measured_from_samples(samples.get(uri, []))
            amplification = (record.tuned_measured or {}).get("write_amplification")
            if amplification is not None:
                measured["write_amplification"] = float(amplification)
            gaps = {str(k): v for k, v in Targets.model_validate(record.targets).gaps(measured).items()}
            out[uri] = (measured, gaps)
        self.store.record_measured(out, now=now)
        return {uri: m for uri, (m, _) in out.items()}

    def retune_due(self, owned: Iterable[str], *, now: datetime | None = None) -> int:
        """Re-tune the ``owned`` tables with targets whose last attempt is ``tuning.interval_hours`` old."""
        now = now or self.store.db_now()
        due = timedelta(hours=self.settings.tuning.interval_hours)
        done = 0
        for uri, record in self.store.tuning_records(owned).items():
            last = max((t for t in (record.tuned_at, record.error_at) if t is not None), default=None)
            if record.targets and (last is None or now - last >= due):
                done += self.retune(uri, record, now=now)
        return done

    def retune(self, uri: str, record: TuningRecord, *, now: datetime) -> bool:
        """Re-tune one table; a failure is logged and recorded, never raised. Returns whether it applied."""
        try:
            applied, interval, reason, predicted, measured = self._retune(uri, record, now)
        except Exception as exc:  # any tuner failure stays with its table
            error = f"{type(exc).__name__}: {exc}"
            logger.error("table {}: re-tune to its targets failed: {}", uri, error)
            try:
                self.store.record_tuning_error(uri, error, now=now)
            except Exception as store_exc:
                logger.error("table {}: cannot record the failed re-tune: {}", uri, store_exc)
            return False
        self.store.record_tuning(uri, overrides=applied, interval_seconds=interval, reason=reason,
                                 predicted=predicted, measured=measured, now=now)
        logger.info("table {}: re-tuned to its targets: {}", uri, reason)
        return True

    def _retune(self, uri: str, record: TuningRecord, now: datetime
                ) -> tuple[dict[str, Any], float, str, dict[str, float], dict[str, float]]:
        t = self.settings.tuning
        table = self.open_table(uri)
        metadata = table.snapshot().metadata
        previous = dict(record.overrides or {})
        resolved = self.policy_file.resolve(name=metadata.name or "", uri=uri, properties=metadata.properties,
                                            tuned=previous)
        current = resolved.policy
        if not current.target.any():
            raise TuningError(f"table {uri} declares no target any more; it is not re-tuned")
        explicit = frozenset(knob_paths(property_overrides(metadata.properties, uri)))
        learned = self.learner(table, t.learn_hours)
        interval = record.interval_seconds or self.settings.scheduler.maintenance_interval_seconds
        result = self.tuner(learned, current.target, current, days=t.days, interval_seconds=interval,
                            now_ms=int(now.timestamp() * 1000), time_budget_s=t.time_budget_seconds)
        step = bounded_step(current, result.overrides, max_step=t.max_step, keep=explicit)
        applied = {k: v for k, v in deep_merge(previous, step).items() if k != "target"}
        checked = self.policy_file.resolve(name=metadata.name or "", uri=uri, properties=metadata.properties,
                                           tuned=applied)
        if applied and not checked.tuned and set(knob_paths(applied)) - explicit:
            raise TuningError(f"table {uri}: the stepped knobs do not fit its policy ({checked.name})")
        new_interval = step_interval(interval, result.interval_seconds, t.max_step)
        measured = dict(record.measured)
        amplification = write_amplification(learned)
        if amplification is not None:
            measured["write_amplification"] = amplification
        moved = ", ".join(f"{k}" for k in knob_paths(step)) or "no knob"
        capped = "" if _reached(step, result.overrides) else f" (at most {t.max_step:g}x per re-tune)"
        reason = f"{result.reason}; moved {moved}{capped}"
        return applied, new_interval, reason, dict(result.predicted), measured


def _reached(step: Mapping[str, Any], tuned: Mapping[str, Any]) -> bool:
    """Whether the step took every tuned knob all the way."""
    flat_step = dict(_flat(step))
    return all(flat_step.get(k) == v for k, v in _flat(tuned) if not k.startswith("target."))


def _flat(nested: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for k, v in nested.items():
        out.extend(_flat(v, f"{prefix}{k}.") if isinstance(v, Mapping) else [(f"{prefix}{k}", v)])
    return out


def _open_table(uri: str) -> Any:
    from maintd.table import Table

    return Table.open(uri)


__all__ = ["Learner", "TargetKeeper", "TuneOutcome", "Tuner", "default_tuner"]
