"""``maintd.Table``: the table of :mod:`maintd.table` with maintenance, reclamation and PURGE from Python.

The table format cannot run maintenance itself (the layers put execution above it), so the public
``Table`` is this subclass, one layer up. ``table.maintain()`` is what ``maintd run --no-reclaim`` does to
one table (the same :class:`~maintd.execution.runner.Runner`: plan with the policy, execute, commit in
groups), ``table.reclaim()`` what ``maintd gc`` does, ``table.purge()`` what ``maintd purge`` does.

Destructive calls are safe by default, as delta-rs's ``vacuum(dry_run=True)``: ``reclaim`` and ``purge``
only report what they would delete until called with ``dry_run=False``. ``maintain`` rewrites files but
deletes none and changes no row, so it runs by default.

Settings (``policy.path``, ``spark``, ``commit``, ``reclaim``) come from the same sources as the CLI's
(``$MAINTD_CONFIG``, ``config/maintd.yaml``, ``MAINTD_*``) unless ``settings`` is given.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from maintd.errors import InvalidInputError, TaskExecutionError
from maintd.execution.runner import Runner, TableRunSummary
from maintd.reclaim import ReclaimReport, purge_table, reclaim_table
from maintd.settings import Settings, load_settings
from maintd.table import Table as _FormatTable


class Table(_FormatTable):
    """A primary-key table at a URI, with maintenance (see the module docstring).

    ``maintd.Table(uri)`` opens a table (``Table.open(uri)`` too); ``Table.create(...)`` makes one.
    """

    def maintain(self, policy: str | os.PathLike[str] | None = None, dry_run: bool = False, *,
                 settings: Settings | None = None, spark: Any = None, use_spark: bool = True,
                 now: datetime | None = None) -> TableRunSummary:
        """Plan, execute and commit maintenance (clustering, compaction) of this table, as ``maintd run``.

        Args:
            policy: a policy YAML file; None: the settings' ``policy.path``, else the packaged policy.
            dry_run: plan only (the summary's ``planned`` lists the tasks); nothing is written.
            settings: the settings; None loads them as the CLI does.
            spark: a SparkSession for the rewrites; None creates one only for a plan above
                ``spark.maintd.inProcess.maxInputBytes``.
            use_spark: False runs every rewrite in this process's threads, whatever the plan's size.
            now: the planner's clock (default: now).

        Returns:
            The run's summary: ``status`` (``ok``, ``nothing``, ``dry-run``, ``partial``, ``failed``), tasks
            planned and committed, files and bytes before and after, versions committed.

        Raises:
            TaskExecutionError: the run failed or only partly committed (see its ``summary``); what committed
                stays.
        """
        chosen = self._settings(settings)
        runner = Runner(chosen, policy_path=None if policy is None else os.fspath(policy), spark=spark,
                        use_spark=use_spark or spark is not None)
        summary = runner.run_table(self.uri, dry_run=dry_run, now=now)
        self.reload()
        if not summary.ok:
            raise TaskExecutionError(f"table {self.uri}: maintenance {summary.status}: {summary.error}",
                                     summary=summary)
        return summary

    def reclaim(self, dry_run: bool = True, *, orphan_grace_hours: float | None = None,
                force_short_grace: bool = False, settings: Settings | None = None,
                now: datetime | None = None) -> ReclaimReport:
        """Expire versions older than ``acid.data.retain.hours`` and delete the files no retained version needs
        and old orphans, as ``maintd gc``. A dry run (the default) deletes nothing and reports what would go.

        Args:
            dry_run: report only (default); False deletes.
            orphan_grace_hours: unreferenced files younger than this are kept (a writer may be about to commit
                them); default: the settings' ``reclaim.orphan_grace_hours`` (72).
            force_short_grace: allow a grace below 1 hour (only when no writer runs).
            settings: the settings; None loads them as the CLI does.
            now: the retention clock; default: now.
        """
        grace, force = self._grace(settings, orphan_grace_hours, force_short_grace)
        report = reclaim_table(self, now=now, orphan_grace=grace, dry_run=dry_run, force_short_grace=force)
        if not dry_run:
            self.reload()
        return report

    def purge(self, dry_run: bool = True, *, partitions: Iterable[Mapping[str, object]] = (),
              force_unpin: bool = False, orphan_grace_hours: float | None = None, force_short_grace: bool = False,
              settings: Settings | None = None, now: datetime | None = None) -> ReclaimReport:
        """Drop all history before the current version now and delete every file it does not reference, as
        ``maintd purge``; recorded as a PURGE commit. A dry run (the default) changes nothing.

        Args:
            dry_run: report only (default); False purges (time travel to older versions ends).
            partitions: limit the deletion of data files and orphans to these partitions (column -> value).
            force_unpin: drop pinned versions too, removing their pins (otherwise live pins refuse the purge).
            orphan_grace_hours, force_short_grace, settings, now: as :meth:`reclaim`.
        """
        grace, force = self._grace(settings, orphan_grace_hours, force_short_grace)
        report = purge_table(self, now=now, partitions=list(partitions), orphan_grace=grace, dry_run=dry_run,
                             force_short_grace=force, force_unpin=force_unpin)
        if not dry_run:
            self.reload()
        return report

    @staticmethod
    def _settings(settings: Settings | None) -> Settings:
        if settings is not None and not isinstance(settings, Settings):
            raise InvalidInputError(f"settings must be maintd.settings.Settings, not {type(settings).__name__}")
        return settings if settings is not None else load_settings(None)

    def _grace(self, settings: Settings | None, hours: float | None, force: bool) -> tuple[timedelta, bool]:
        """The orphan grace and whether a short one is allowed: as ``maintd gc`` decides them."""
        reclaim = self._settings(settings).reclaim
        chosen = reclaim.orphan_grace_hours if hours is None else hours
        return timedelta(hours=chosen), force or (hours is None and reclaim.force_short_grace)


__all__ = ["Table"]
