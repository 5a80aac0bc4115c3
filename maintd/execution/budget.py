"""The daemon-wide maintenance budget: token buckets for bytes read, bytes written and object-store requests.

One :class:`Budget` per daemon caps what all its runs move per second, since maintenance shares its storage with
the workload it maintains. The budget is spent where units are *released*: the driver admits each pack
(:func:`maintd.execution.scheduler.run_units`) against its planned input bytes, estimated output bytes and
estimated requests (:func:`unit_cost`) before dispatching it, and settles the estimate against what the units
report when they end. Packs are sized within a burst (:meth:`Budget.max_pack_bytes`); a single unit larger than
a burst is admitted when its bucket is full and leaves it in debt. So the bytes released in any window of T
seconds are at most ``rate * T + max(burst, largest unit)``.

The driver's own requests (listings, log reads, commits, deletes) pass the storage layer's request gate
(:mod:`maintd.storage.requests`), which this budget serves before any waiting pack.

Runs waiting for the budget queue unhealthiest table first (``priority``:
:func:`maintd.planner.health.distance_from_targets`), then in arrival order, so a large pack is not starved by
smaller ones.

Written here because the rate-limit libraries (pyrate-limiter, ``limits``, aiolimiter) keep an entry per unit of
weight, refuse weights above the limit, read the wall clock themselves or need asyncio, and none settles an
estimate against the actual cost. docs/policies.md ("Budget") describes the settings and the bound.
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from maintd.execution.specs import TaskResult, TaskSpec

KINDS = ("read_bytes", "write_bytes", "requests")
REQUEST_BYTES = 8 << 20
"""Bytes one ranged read or upload part moves, for estimating requests (pyarrow's object-store readers and
writers move a file in parts of this order)."""
REQUESTS_PER_FILE = 2
"""Requests per file read or written beyond its parts: a footer read or a HEAD; the create or complete."""
BINDING_SECONDS = 60.0
"""The budget counts as binding while a run waits for it, and for this long after a run last had to wait."""
EPSILON = 1e-9
"""A shortfall this small (relative to the burst) is rounding, not a wait: waiting it out would never end."""
Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Cost:
    """What a pack of units (or a request) spends: bytes read, bytes written, object-store requests."""

    read_bytes: int = 0
    write_bytes: int = 0
    requests: int = 0

    def of(self, kind: str) -> int:
        return int(getattr(self, kind))

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.read_bytes + other.read_bytes, self.write_bytes + other.write_bytes,
                    self.requests + other.requests)


def _requests(files: int, size: int) -> int:
    return REQUESTS_PER_FILE * files + math.ceil(size / REQUEST_BYTES)


def unit_cost(spec: TaskSpec) -> Cost:
    """A unit's cost before it runs: its inputs (and the BaseFiles a lookup reads), an output as large as its
    input (a rewrite writes at most about what it reads), in files of the target size."""
    files = list(spec.inputs) + (list(spec.lookup.bases) if spec.lookup is not None else [])
    read = sum(f.bytes for f in files)
    out_files = max(1, math.ceil(read / max(1, spec.target_file_bytes)))
    return Cost(read, read, _requests(len(files), read) + _requests(out_files, read))


def result_cost(spec: TaskSpec, result: TaskResult) -> Cost:
    """A unit's cost once it ran, from what it reports (its estimate when it failed: what it moved is unknown)."""
    if not result.ok:
        return unit_cost(spec)
    files = len(spec.inputs) + (len(spec.lookup.bases) if spec.lookup is not None else 0)
    written = len(result.adds) + len(result.priors)
    return Cost(result.bytes_read, result.bytes_written,
                _requests(files, result.bytes_read) + _requests(written, result.bytes_written))


def pack_cost(specs: Iterable[TaskSpec]) -> Cost:
    return sum((unit_cost(s) for s in specs), Cost())


class TokenBucket:
    """``rate`` tokens a second up to ``burst``; not locked (the :class:`Budget` holds the lock).

    A take larger than what is there leaves the bucket in debt (a negative level) that refills at the rate.
    """

    def __init__(self, rate: float, burst: float, clock: Clock = time.monotonic) -> None:
        if rate <= 0 or burst <= 0:
            raise ValueError(f"a token bucket needs a positive rate and burst, not {rate} and {burst}")
        self.rate, self.burst, self._clock = float(rate), float(burst), clock
        self.level, self._stamp = float(burst), clock()

    def available(self) -> float:
        now = self._clock()
        self.level = min(self.burst, self.level + (now - self._stamp) * self.rate)
        self._stamp = now
        return self.level

    def wait_for(self, amount: float) -> float:
        """Seconds until ``amount`` can be taken (capped at a full bucket: a larger take waits for a full one)."""
        missing = min(amount, self.burst) - self.available()
        return 0.0 if missing <= EPSILON * self.burst else missing / self.rate

    def take(self, amount: float) -> None:
        self.available()
        self.level -= amount

    def give(self, amount: float) -> None:
        self.level = min(self.burst, self.available() + amount)


@dataclass(order=True)
class Ticket:
    """A place in the budget's line: higher ``priority`` first, then arrival."""

    sort_key: tuple[float, int]
    cost: Cost = field(compare=False)
    since: float = field(compare=False)
    blocked: set[str] = field(default_factory=set, compare=False)


@dataclass
class KindStats:
    """What one kind of the budget did, for metrics."""

    admitted: int = 0
    waits: int = 0
    throttled_seconds: float = 0.0


class Budget:
    """Token buckets of the kinds that have a limit (``limits``: kind -> (rate per second, burst)).

    Thread-safe: every run of the daemon admits its packs here, and the storage gate its requests.
    """

    def __init__(self, limits: Mapping[str, tuple[float, float]], *, clock: Clock = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, history: int = 10_000) -> None:
        unknown = set(limits) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown budget kind(s) {sorted(unknown)}; known: {', '.join(KINDS)}")
        self.buckets = {k: TokenBucket(rate, burst, clock) for k, (rate, burst) in limits.items()}
        self.stats = {k: KindStats() for k in KINDS}
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Lock()
        self._line: list[Ticket] = []
        self._seq = itertools.count()
        self._last_wait: float | None = None
        self.admissions: deque[tuple[float, Cost]] = deque(maxlen=history)
        """The latest admissions (monotonic time, cost): what was released when, for tests and benchmarks."""

    @property
    def limited(self) -> bool:
        return bool(self.buckets)

    def max_pack_bytes(self) -> int | None:
        """The largest pack input that fits in a burst of bytes (None: bytes are not limited)."""
        bursts = [self.buckets[k].burst for k in ("read_bytes", "write_bytes") if k in self.buckets]
        return int(min(bursts)) if bursts else None

    def ticket(self, cost: Cost, priority: float = 0.0) -> Ticket:
        """Join the line for ``cost``; then :meth:`try_admit` until admitted, or :meth:`withdraw`."""
        with self._lock:
            t = Ticket((-priority, next(self._seq)), cost, self._clock())
            heapq.heappush(self._line, t)
            return t

    def try_admit(self, ticket: Ticket) -> float:
        """Spend ``ticket``'s cost if it is first in line and every bucket can pay: 0.0, the ticket leaves the line;
        else the seconds to wait before trying again (a ticket behind another waits at least as long)."""
        with self._lock:
            head = self._line[0] if self._line else ticket
            waits = {k: b.wait_for(head.cost.of(k)) for k, b in self.buckets.items()}
            short = {k for k, w in waits.items() if w > 0}
            if head is not ticket or short:
                head.blocked |= short
                ticket.blocked |= short or head.blocked  # behind the head, it waits for what the head waits for
                self._last_wait = self._clock()
                return max(0.01, max(waits.values(), default=0.0))
            heapq.heappop(self._line)
            self._spend(ticket.cost, ticket)
            return 0.0

    def withdraw(self, ticket: Ticket) -> None:
        """Leave the line without spending (the run was cancelled)."""
        with self._lock:
            if ticket in self._line:
                self._line.remove(ticket)
                heapq.heapify(self._line)

    def settle(self, estimate: Cost, actual: Cost) -> None:
        """Charge what admitted work spent beyond its estimate, or give back what it did not spend."""
        with self._lock:
            for kind, bucket in self.buckets.items():
                diff = actual.of(kind) - estimate.of(kind)
                if diff > 0:
                    bucket.take(diff)
                elif diff < 0:
                    bucket.give(-diff)
            for kind in KINDS:
                self.stats[kind].admitted += actual.of(kind) - estimate.of(kind)

    def acquire_requests(self, count: int = 1) -> None:
        """Block until ``count`` requests may be sent (the storage gate): ahead of every waiting pack, since a
        driver's request (a commit, a listing) is what finishes the work packs release."""
        if "requests" not in self.buckets:
            return
        ticket = Ticket((0.0, 0), Cost(requests=count), self._clock())
        while True:
            with self._lock:
                wait = self.buckets["requests"].wait_for(count)
                if wait <= 0:
                    self._spend(ticket.cost, ticket)
                    return
                ticket.blocked.add("requests")
                self._last_wait = self._clock()
            self._sleep(wait)

    def _spend(self, cost: Cost, ticket: Ticket) -> None:
        now = self._clock()
        for kind, bucket in self.buckets.items():
            bucket.take(cost.of(kind))
        for kind in KINDS:
            self.stats[kind].admitted += cost.of(kind)
        for kind in ticket.blocked:
            self.stats[kind].waits += 1
            self.stats[kind].throttled_seconds += now - ticket.since
        self.admissions.append((now, cost))

    def binding(self) -> bool:
        """Whether runs wait for the budget now, or had to within the last :data:`BINDING_SECONDS`."""
        with self._lock:
            if self._line:
                return True
            return self._last_wait is not None and self._clock() - self._last_wait < BINDING_SECONDS

    def tokens(self) -> dict[str, float]:
        """The tokens each limited kind has now (negative: in debt)."""
        with self._lock:
            return {k: b.available() for k, b in self.buckets.items()}

    def limits(self) -> dict[str, tuple[float, float]]:
        return {k: (b.rate, b.burst) for k, b in self.buckets.items()}


__all__ = ["KINDS", "Budget", "Cost", "TokenBucket", "pack_cost", "result_cost", "unit_cost"]
