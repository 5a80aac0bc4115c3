"""Retry bounds of commits: exponential backoff with full jitter, bounded by attempts and total time."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    """Bounds of the commit retry loop: attempts, backoff (seconds) and total time (seconds).

    The same bounds apply, afresh, to finding out whether an attempt whose answer was lost has landed.
    """

    max_attempts: int = 40
    base_delay: float = 0.005
    max_delay: float = 1.0
    total_timeout: float = 120.0

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Full-jitter exponential backoff: uniform in [0, min(max, base * 2**attempt)]."""
        return rng.uniform(0, min(self.max_delay, self.base_delay * (2**attempt)))


DEFAULT_RETRY = RetryPolicy()


class Budget:
    """Tries spent against a policy since it was made: the attempts, and the time."""

    def __init__(self, policy: RetryPolicy, rng: random.Random) -> None:
        self.policy = policy
        self.rng = rng
        self.tries = 0
        self.started = time.monotonic()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def spent(self, tries: int | None = None) -> bool:
        """Whether ``tries`` (default: the tries counted here) or the time used up the policy."""
        n = self.tries if tries is None else tries
        return n >= self.policy.max_attempts or self.elapsed > self.policy.total_timeout

    def pause(self, tries: int | None = None) -> None:
        """Count a try and sleep the backoff for it."""
        self.tries += 1
        time.sleep(self.policy.delay(self.tries if tries is None else tries, self.rng))


__all__ = ["DEFAULT_RETRY", "Budget", "RetryPolicy"]
