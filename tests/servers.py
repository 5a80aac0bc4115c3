"""The processes of the real servers the tests start (moto, Azurite, a standalone Spark cluster's daemons): a free
loopback port for each, a wait until they answer, and a stop.

Importable as ``from servers import ...`` from every test module (``tests/`` is on pytest's path), as
:mod:`waiting` is.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
from collections.abc import Callable, Sequence
from typing import IO

from waiting import wait_until


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now (the system's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listens(port: int) -> bool:
    """Whether something accepts TCP connections on ``port`` of 127.0.0.1 (an ``OSError`` when nothing does)."""
    socket.create_connection(("127.0.0.1", port), timeout=2).close()
    return True


def wait_answering(procs: Sequence[subprocess.Popen[bytes]], answers: Callable[[], object], what: str, *,
                   timeout: float = 60.0, poll: float = 0.1) -> None:
    """Wait until ``answers()`` returns a true value while every one of ``procs`` still runs.

    ``answers`` raising ``OSError`` (connection refused, a timeout) or ``ValueError`` (a half-written answer)
    means not yet. A process of ``procs`` that exits ends the wait at once, rather than at the deadline.

    Raises:
        AssertionError: a process exited, or ``what`` did not answer within ``timeout`` seconds.
    """
    def up() -> bool:
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(f"{p.args[0] if isinstance(p.args, list) else p.args} exited with code "
                                     f"{p.returncode} while waiting for {what}")
        with contextlib.suppress(OSError, ValueError):
            return bool(answers())
        return False

    wait_until(up, what, timeout=timeout, poll=poll)


def wait_started(proc: subprocess.Popen[bytes], log: IO[bytes], answers: Callable[[], object], what: str) -> None:
    """Wait until the server ``proc`` answers (:func:`wait_answering`); if it does not, stop it and say where its
    log is.

    Raises:
        RuntimeError: the server exited or did not answer in time.
    """
    try:
        wait_answering([proc], answers, what)
    except AssertionError as exc:
        stop_server(proc, log)
        raise RuntimeError(f"{what} did not start (see {log.name}): {exc}") from None


def stop_server(proc: subprocess.Popen[bytes], log: IO[bytes]) -> None:
    """Stop a test server's process (terminate, then kill after 10 s) and close its log."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    log.close()
