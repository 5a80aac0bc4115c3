"""Candidates of a tuning search simulated in batches, over several worker processes when there are CPUs for them.

Most of a simulation is the real planner, pure Python, so threads would share one core; processes do not. The
workers are forked from the searching process (the learned pattern and the starting snapshot are inherited,
never copied through a pipe) and receive only each candidate's policy and schedule. Results come back in the
order the batch was given, whatever order the workers finish in, and every job of a batch carries the same byte
bound, fixed before the batch starts, so a search over batches is deterministic and gives the same answer with
one worker or many. Deadlines are on ``time.monotonic()``, which every process on the machine shares.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass

from maintd.planner import Policy
from maintd.simulate.measure import Cut, Measures, measure
from maintd.simulate.report import DAY_MS
from maintd.simulate.schedule import Schedule
from maintd.simulate.simulator import Learned


@dataclass(frozen=True)
class Job:
    """One simulation to run: a policy on a maintenance interval over ``days``, cut past ``bound`` bytes
    rewritten or ``deadline`` (``time.monotonic()``)."""

    policy: Policy
    interval_s: float
    days: int
    bound: int | None = None
    deadline: float | None = None


_LEARNED: tuple[Learned, int, float] | None = None
"""In a worker: the learned pattern, the start time and the reclamation interval (set by :func:`_init`)."""


def _init(learned: Learned, start_ms: int, reclamation_s: float) -> None:
    global _LEARNED
    _LEARNED = (learned, start_ms, reclamation_s)


def _run(job: Job) -> Measures | None:
    assert _LEARNED is not None, "the worker was initialised"
    return run_job(*_LEARNED, job)


def run_job(learned: Learned, start_ms: int, reclamation_s: float, job: Job) -> Measures | None:
    """Simulate and measure one job; None when it was cut (over its bound or past its deadline)."""
    schedule = Schedule(job.interval_s, reclamation_s, "tuning")
    try:
        return measure(learned, job.policy, schedule, start_ms=start_ms, end_ms=start_ms + job.days * DAY_MS,
                       max_rewritten=job.bound, deadline=job.deadline)
    except Cut:
        return None


class Evaluator:
    """Runs batches of :class:`Job` for one learned pattern: in this process with one worker, else in a pool of
    forked processes started at the first batch of two or more jobs. Use as a context manager (the pool ends
    with it, pending jobs cancelled)."""

    def __init__(self, learned: Learned, start_ms: int, reclamation_s: float, workers: int = 1) -> None:
        self.learned, self.start_ms, self.reclamation_s = learned, start_ms, reclamation_s
        self.workers = max(1, workers)
        self._pool: Executor | None = None

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def run(self, jobs: Sequence[Job]) -> list[Measures | None]:
        """Each job's measures (None: cut), in the order of ``jobs``."""
        if self.workers == 1 or len(jobs) < 2 or not _can_fork():
            return [run_job(self.learned, self.start_ms, self.reclamation_s, j) for j in jobs]
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                self.workers, mp_context=multiprocessing.get_context("fork"), initializer=_init,
                initargs=(self.learned, self.start_ms, self.reclamation_s))
        return list(self._pool.map(_run, jobs))


def _can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


__all__ = ["Evaluator", "Job", "run_job"]
