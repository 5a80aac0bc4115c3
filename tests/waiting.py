"""The one way a test waits for something another thread or process does: a condition polled under a deadline.

Tests never sleep for a guessed fraction of a second (docs/testing.md, "Rules every test follows";
``tests/test_test_rules.py`` holds the rule). Importable as ``from waiting import wait_until`` from every test
(``tests/`` is on pytest's path) and from a worker script that puts ``tests/`` on ``sys.path`` first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

FIRST_POLL_SECONDS = 0.005
"""The first pause between two looks at the condition; each pause doubles up to ``poll``."""


def wait_until(condition: Callable[[], T], what: str = "the condition", *, timeout: float = 60.0,
               poll: float = 0.1, required: bool = True) -> T:
    """Poll ``condition`` until it returns a true value, and return that value.

    Args:
        condition: called again and again; an exception it raises (an assertion that a watched process is
            still alive, say) ends the wait and propagates.
        what: what is waited for, named in the error.
        timeout: the deadline, in seconds from the call: generous (a loaded machine is slow), since a wait
            that succeeds returns as soon as the condition holds.
        poll: the longest pause between two looks, in seconds (pauses start at ``FIRST_POLL_SECONDS`` and
            double): larger for a costly condition, smaller for processes that must start together.
        required: when false, the deadline is an answer, not a failure: the condition's last (false) value
            is returned at the deadline.

    Raises:
        AssertionError: the condition did not hold within ``timeout`` seconds (``required`` only).
    """
    deadline = time.monotonic() + timeout
    pause = min(FIRST_POLL_SECONDS, poll)
    while True:
        found = condition()
        if found:
            return found
        left = deadline - time.monotonic()
        if left <= 0:
            if required:
                raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
            return found
        time.sleep(min(pause, left))
        pause = min(pause * 2, poll)
