"""The request gate: where a daemon-wide budget of object-store requests is spent in this process.

The storage layer knows no budget (it sits below execution and the service); the daemon installs one
(:class:`maintd.execution.budget.Budget`), and every request the object-store client of this process sends
(:class:`~maintd.storage.objectstore.ObjectStoreStorage`: listings, log reads, commits, deletes) first asks it.
Nothing is installed by default, nor in child processes and on Spark executors, whose requests the budget
accounts for when it releases their work. A local disk sends no requests and asks nothing.
"""

from __future__ import annotations

import threading
from typing import Protocol


class RequestGate(Protocol):
    """What a request waits on."""

    def acquire_requests(self, count: int = 1) -> None:
        """Return once ``count`` requests may be sent (block while the budget has none)."""


_lock = threading.Lock()
_installed: RequestGate | None = None


def install_request_gate(gate: RequestGate | None) -> RequestGate | None:
    """Make ``gate`` the request gate of this process (None: none); returns the one it replaces."""
    global _installed
    with _lock:
        previous, _installed = _installed, gate
    return previous


def before_request(count: int = 1) -> None:
    """Called by a storage before it sends ``count`` requests."""
    gate = _installed
    if gate is not None:
        gate.acquire_requests(count)


__all__ = ["RequestGate", "before_request", "install_request_gate"]
