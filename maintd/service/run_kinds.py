"""What a run did and where it is: the enums of :mod:`maintd.service.records`, in a module of their own because
the command line names them in its options (``maintd history --kind --status``), so every command imports them.
"""

from __future__ import annotations

from enum import StrEnum


class RunKind(StrEnum):
    """What a run did."""

    MAINTENANCE = "maintenance"
    RECLAIM = "reclaim"


class RunStatus(StrEnum):
    """Where a run is. Only ``RUNNING`` is not final."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"  # nothing to do, or the table was busy
    ABANDONED = "abandoned"  # the daemon stopped (SIGTERM, lost lease, crash) before the run ended
