"""The test S3 server serves store-changing requests one at a time (tests/s3app.py), so a conditional create
is atomic as on S3; reads stay concurrent."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from s3app import AtomicWrites

REQUEST_SECONDS = 0.05
"""How long the stand-in app takes to serve a request, so that requests served together overlap (simulated)."""


class SlowApp:
    """A WSGI app that takes a while per request and records how many requests of each method overlap."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: dict[str, int] = {}
        self.most: dict[str, int] = {}

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        method = environ["REQUEST_METHOD"]
        with self.lock:
            self.running[method] = self.running.get(method, 0) + 1
            self.most[method] = max(self.most.get(method, 0), self.running[method])
        time.sleep(REQUEST_SECONDS)
        start_response("200 OK", [])
        with self.lock:
            self.running[method] -= 1
        yield b"done"


def test_writes_are_served_one_at_a_time_and_reads_together() -> None:
    app = SlowApp()
    wrapped = AtomicWrites(app)
    bodies: list[bytes] = []

    def call(method: str) -> None:
        bodies.extend(wrapped({"REQUEST_METHOD": method}, lambda *a: None))

    threads = [threading.Thread(target=call, args=(m,)) for m in ["PUT", "POST", "DELETE"] * 3 + ["GET"] * 6]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bodies.count(b"done") == len(threads)
    assert max(app.most[m] for m in ("PUT", "POST", "DELETE")) == 1
    assert app.most["GET"] > 1
