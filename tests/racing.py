"""Threads that race: ``race(n, work)`` runs ``work(0)`` ... ``work(n - 1)`` on ``n`` threads released together."""

from __future__ import annotations

import threading
from collections.abc import Callable


def race(n: int, work: Callable[[int], object]) -> None:
    """Run ``work(w)`` for ``w`` in ``range(n)``, each on its own thread, all started at one barrier so that their
    first steps collide; returns once every thread ended, and fails naming every error a thread raised."""
    start = threading.Barrier(n)
    errors: list[BaseException] = []

    def run(w: int) -> None:
        try:
            start.wait()
            work(w)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
