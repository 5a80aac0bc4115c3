"""Pinned snapshots (reader leases): keep one version readable for a while, whatever retention says.

A long query or a downstream job reads a version that reclamation could expire under it (the cleaner deleting
files a 2.5-hour query needed). It pins the version first: a ``pin`` action committed through the log, so
every maintd instance and every engine sees it, and carried in checkpoints, so it outlives the commit that
made it. Reclamation keeps every version from the oldest live pin on (and the files they read) until the pin
is removed or its TTL passes; PURGE refuses to drop a pinned version unless told to unpin it.

A pin and a reclamation race safely: reclamation commits what it expires before deleting anything, and the
two commits conflict (:class:`~maintd.errors.PinConflictError`), so a pin is never acknowledged for a version
whose files are deleted (docs/format.md, "Pins").
"""

from __future__ import annotations

import contextlib
import getpass
import os
import socket
import uuid
from datetime import timedelta
from typing import Any
from typing import Protocol as TypingProtocol

from maintd.errors import InvalidInputError, VersionNotFoundError
from maintd.table.log import features, timeline
from maintd.table.log.actions import Pin
from maintd.table.log.snapshot import Snapshot
from maintd.table.log.timeline import now_ms
from maintd.table.transaction import CommitTarget, Transaction

PIN_OPERATION = "PIN"
UNPIN_OPERATION = "UNPIN"
MAX_TTL = timedelta(days=366)
"""A pin holds at most this long: a forgotten pin must not keep history forever."""


class PinTarget(CommitTarget, TypingProtocol):
    """What pinning needs of a table (:class:`maintd.table.Table` is one): a transaction on a given state."""

    def new_transaction(self, operation: str, *, read_snapshot: Snapshot | None = None,
                        isolation_level: Any = None) -> Transaction: ...


def who() -> str:
    """``user@host`` of this process (``$MAINTD_USER`` if set), recorded with pins and PURGEs."""
    user = os.environ.get("MAINTD_USER")
    if not user:
        with contextlib.suppress(OSError, KeyError):
            user = getpass.getuser()
    return f"{user or f'uid {os.getuid()}'}@{socket.gethostname()}"


def oldest_pinned(snapshot: Snapshot, at_ms: int) -> int | None:
    """The oldest version a live pin holds at ``at_ms`` (None: no live pin)."""
    live = snapshot.live_pins(at_ms)
    return live[0].version if live else None


def pin_version(table: PinTarget, version: int, ttl: timedelta, reason: str = "", *, user: str | None = None) -> Pin:
    """Pin ``version`` of ``table`` for ``ttl`` (see :meth:`maintd.table.Table.pin`)."""
    uri = table.uri
    if not isinstance(ttl, timedelta):
        raise InvalidInputError(f"table {uri}: the pin TTL must be a datetime.timedelta (e.g. timedelta(hours=3)), "
                                f"not {type(ttl).__name__}")
    if ttl <= timedelta(0):
        raise InvalidInputError(f"table {uri}: pin TTL {ttl} is not positive; give how long the readers of version "
                                f"{version} need it (e.g. --ttl-hours 3)")
    if ttl > MAX_TTL:
        raise InvalidInputError(f"table {uri}: pin TTL {ttl} is longer than {MAX_TTL.days} days; pin for less and "
                                "pin again when it runs out")
    if isinstance(version, bool) or not isinstance(version, int):
        raise InvalidInputError(f"table {uri}: the version to pin must be an integer, not {version!r}")
    snap = table.snapshot()
    now = now_ms()
    if version < 0 or version > snap.version:
        raise VersionNotFoundError(f"table {uri} has no version {version}; the latest is {snap.version}: pin an "
                                   "existing version (`maintd table history` lists them)", latest=snap.version)
    floor = max(snap.expired_before, timeline.oldest_retained_version(table.log, snap.version, snap.retain_hours, now))
    held = oldest_pinned(snap, now)
    if held is not None:
        floor = min(floor, max(held, snap.expired_before))
    if version < floor:
        raise VersionNotFoundError(
            f"table {uri}: version {version} has expired (acid.data.retain.hours={snap.retain_hours}); the oldest "
            f"retained version is {floor}: pin version {floor} or newer", oldest_retained=floor, latest=snap.version)
    table.snapshot(version)  # still buildable: VersionNotFoundError (naming the oldest retained) if not
    ttl_ms = int(ttl.total_seconds() * 1000)
    pin = Pin(id=uuid.uuid4().hex[:16], version=version, created=now, expires=now + max(1, ttl_ms),
              reason=reason, who=user or who())
    txn = table.new_transaction(PIN_OPERATION, read_snapshot=snap)
    txn.require_feature(features.PINS)  # the first pin: a legacy table goes to protocol 3, a named one gains pins
    txn.pin(pin)
    txn.commit(parameters={"pin_id": pin.id, "version": version, "expires": pin.expires, "reason": reason,
                           "who": pin.who})
    return pin


def unpin(table: PinTarget, pin_id: str, *, reason: str = "released") -> int:
    """Remove pin ``pin_id``; returns the committed version (see :meth:`maintd.table.Table.unpin`)."""
    snap = table.snapshot()
    if pin_id not in snap.pins:
        known = ", ".join(sorted(snap.pins)) or "none"
        raise InvalidInputError(f"table {table.uri} has no pin {pin_id!r} (its pins: {known}); `maintd table pins "
                                f"{table.uri}` lists them")
    txn = table.new_transaction(UNPIN_OPERATION, read_snapshot=snap)
    txn.unpin(pin_id, reason)
    return txn.commit(parameters={"pin_id": pin_id, "version": snap.pins[pin_id].version, "reason": reason})


__all__ = ["MAX_TTL", "PIN_OPERATION", "UNPIN_OPERATION", "oldest_pinned", "pin_version", "unpin", "who"]
