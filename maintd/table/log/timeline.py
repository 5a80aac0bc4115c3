"""The timeline of commits: commit times, time-travel lookup and the retention boundary.

Commit timestamps are strictly increasing (a commit takes ``max(now, previous + 1 ms)``), so
version lookups by time are binary searches over a handful of commit files.

Times given by users mean one thing everywhere: a naive ``datetime`` (or an ISO-8601 string without an
offset) is UTC, as every time in the log is (:func:`to_epoch_ms`); aware ones are converted.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from maintd.errors import InvalidInputError, VersionNotFoundError
from maintd.table.log.actions import EXPIRE_OPERATION, CommitInfo
from maintd.table.log.tablelog import TableLog

HOUR_MS = 3_600_000


def now_ms() -> int:
    """The wall clock in epoch milliseconds: the clock commit times are taken from."""
    return int(time.time() * 1000)


def to_epoch_ms(t: datetime | int | float | str) -> int:
    """Epoch milliseconds of a time: a datetime or ISO-8601 string (naive means UTC), or epoch ms as a number."""
    if isinstance(t, str):
        try:
            t = datetime.fromisoformat(t)
        except ValueError:
            raise InvalidInputError(
                f"time {t!r} is not ISO-8601; write it as e.g. 2026-01-05T08:00:00Z (no offset means UTC)") from None
    if isinstance(t, datetime):
        return int((t if t.tzinfo is not None else t.replace(tzinfo=UTC)).timestamp() * 1000)
    return int(t)


def commit_time(log: TableLog, version: int) -> int | None:
    """The commit timestamp (ms) of ``version``, or None if its commit file is gone."""
    actions = log.read_commit(version)
    if actions is None:
        return None
    return next((a.timestamp for a in actions if isinstance(a, CommitInfo)), 0)


def commit_info(log: TableLog, version: int) -> CommitInfo | None:
    actions = log.read_commit(version)
    if actions is None:
        return None
    return next((a for a in actions if isinstance(a, CommitInfo)), None)


def oldest_available(log: TableLog, latest: int) -> int:
    """The oldest version whose commit file exists (log reclamation removes the older ones).

    A binary search, for readers (a few ``stat`` calls); reclamation, which lists the log anyway, uses
    :func:`maintd.table.log.tablelog.oldest_buildable`, which no commit left in removed history can mislead.
    """
    if log.commit_exists(0):
        return 0
    lo, hi = 0, latest  # hi exists, lo does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if log.commit_exists(mid):
            hi = mid
        else:
            lo = mid
    return hi


def first_version_at_or_after(log: TableLog, lo: int, hi: int, ts: int) -> int | None:
    """Smallest version in [lo, hi] whose commit time is >= ts, or None."""
    if (commit_time(log, hi) or 0) < ts:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        t = commit_time(log, mid)
        if t is not None and t >= ts:
            hi = mid
        else:
            lo = mid + 1
    return lo


def oldest_retained_version(log: TableLog, latest: int, retain_hours: int, now_ms: int,
                            start: int | None = None) -> int:
    """The oldest version that is still retained (Delta Lake's rule): the newest version committed at or before
    ``now - retain hours``, which was the table's state at that moment, so every time in the window can be
    read. The oldest version that can still be built (``start``, by :func:`oldest_available` if not given)
    when none was committed that early; the latest when 0."""
    if retain_hours == 0:
        return past_expire_commits(log, latest, start if start is not None else 0)
    start = oldest_available(log, latest) if start is None else start
    after = first_version_at_or_after(log, start, latest, now_ms - retain_hours * HOUR_MS + 1)
    return past_expire_commits(log, latest if after is None else max(start, after - 1), start)


def past_expire_commits(log: TableLog, floor: int, start: int) -> int:
    """``floor``, moved back over the expire commits it stands on (not below ``start``).

    Reclamation's expire commit changes no row, so the version before it holds the same rows: it stays
    retained with it. Otherwise each reclamation of an idle table would expire the version before its own
    expire commit, and add another expire commit in doing so.
    """
    while floor > start:
        info = commit_info(log, floor)
        if info is None or info.operation != EXPIRE_OPERATION:
            break
        floor -= 1
    return floor


def check_retained(log: TableLog, version: int, latest: int, retain_hours: int, now_ms: int, uri: str,
                   pinned: int | None = None) -> None:
    """Raise :class:`VersionNotFoundError` if ``version`` is outside retained history (which reaches back to the
    oldest pinned version ``pinned``, if older: reclamation keeps every version from it on)."""
    if version > latest or version < 0:
        raise VersionNotFoundError(f"table {uri} has no version {version}; the latest is {latest}", latest=latest)
    oldest = oldest_retained_version(log, latest, retain_hours, now_ms)
    if pinned is not None:
        oldest = min(oldest, pinned)
    if version < oldest:
        raise VersionNotFoundError(
            f"table {uri}: version {version} is older than the retained history "
            f"(acid.data.retain.hours={retain_hours}); the oldest retained version is {oldest}",
            oldest_retained=oldest, latest=latest,
        )


def version_as_of(log: TableLog, latest: int, ts_ms: int, uri: str) -> int:
    """The newest version committed at or before ``ts_ms``."""
    start = oldest_available(log, latest)
    after = first_version_at_or_after(log, start, latest, ts_ms + 1)
    version = latest if after is None else after - 1
    if version < start:
        raise VersionNotFoundError(
            f"table {uri}: no version was committed at or before the requested time; "
            f"the oldest retained version is {start}", oldest_retained=start, latest=latest,
        )
    return version
