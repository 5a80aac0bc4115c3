"""Replicas share the tables: each table is checked by one live replica, chosen by rendezvous hashing.

Every daemon renews a row of ``maintd_replicas`` with its leases (database clock). The replicas seen within
:func:`live_for` (``lease_duration_seconds - 1.5 * lease_renew_interval_seconds``: 30 s by default) are
live. Each table belongs to the live replica whose hash of (replica, table) is highest (rendezvous hashing:
when a replica comes or goes, only the tables it owned or takes move, and every replica computes the same
owner from the same list). A replica checks only the tables it owns, so a table is checked once per
interval whatever the number of replicas.

A replica that dies stops renewing its row. The others see it gone at their first renewal after
:func:`live_for`, so within ``live_for + lease_renew_interval_seconds`` of its death, take its tables, and
check at once those they took. By default that is 50 s of the 60 s lease: within one lease period whenever
the renewal interval is at most a third of it. A replica that stops cleanly removes its row, so its tables
move on at the others' next renewal. Two replicas may briefly disagree on the owner while
their lists differ; both may then check a table, which costs a look at its log: a run still needs the
table's lease (:mod:`maintd.service.leases`), so no table is ever maintained by two replicas at once.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable

from maintd.service.store import StateStore


def _score(replica: str, uri: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{replica}\0{uri}".encode(), digest_size=8).digest(), "big")


def live_for(lease_seconds: float, renew_seconds: float) -> float:
    """How long a replica stays live without renewing its row: a renewal and a half short of the lease, so a
    dead replica's tables move within the lease; never less than a renewal and a half, so one late renewal
    of a busy replica does not hand its tables on."""
    return max(lease_seconds - 1.5 * renew_seconds, 1.5 * renew_seconds)


def owner(replicas: Iterable[str], uri: str) -> str:
    """The replica that owns ``uri`` among ``replicas`` (not empty)."""
    return max(replicas, key=lambda replica: (_score(replica, uri), replica))


class Membership:
    """This replica's view of the live replicas, and which tables it owns.

    Args:
        store: the state store holding ``maintd_replicas``.
        holder: this replica's id.
        live_for: seconds a replica stays live without renewing its row.
    """

    def __init__(self, store: StateStore, holder: str, live_for: float) -> None:
        self.store = store
        self.holder = holder
        self.live_for = live_for
        self._live: tuple[str, ...] = (holder,)
        self._owned: dict[str, bool] = {}
        self._lock = threading.Lock()

    @property
    def live(self) -> tuple[str, ...]:
        """The live replicas at the last renewal (this one included)."""
        return self._live

    def renew(self) -> tuple[set[str], set[str]]:
        """Renew this replica's row and read the live replicas.

        Returns:
            The replicas that joined and those that left since the last renewal.

        Raises:
            StateStoreError: the store cannot be reached (the last list is kept).
        """
        live = tuple(sorted(set(self.store.heartbeat(self.holder, self.live_for)) | {self.holder}))
        with self._lock:
            before, self._live = set(self._live), live
            if set(live) != before:
                self._owned = {}
        return set(live) - before, before - set(live)

    def owns(self, uri: str) -> bool:
        """Whether this replica owns ``uri`` (cached until the live replicas change)."""
        with self._lock:
            mine = self._owned.get(uri)
            live = self._live
        if mine is None:
            mine = len(live) == 1 or owner(live, uri) == self.holder
            with self._lock:
                if self._live == live:
                    self._owned[uri] = mine
        return mine

    def owned(self, uris: Iterable[str]) -> list[str]:
        """Those of ``uris`` this replica owns, in order."""
        return [uri for uri in uris if self.owns(uri)]

    def leave(self) -> None:
        """Remove this replica's row (on a clean stop)."""
        self.store.leave(self.holder)


__all__ = ["Membership", "live_for", "owner"]
