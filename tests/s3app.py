"""Start the moto S3 server with its writes made atomic: ``python tests/s3app.py -H HOST -p PORT``.

moto checks ``If-None-Match: *`` and then stores the object in two steps, on a server that answers each
request in its own thread, so two creates of one key that arrive together can both succeed (seen in the model
check on S3: two writers each told that their commit landed at the same version). S3 itself makes a
conditional put atomic, and the log's commit protocol rests on exactly that. This launcher runs moto's own
application as ``moto_server`` does, with one change: requests that change the store (PUT, POST, DELETE)
are served one at a time, so a conditional create is atomic as on S3. Reads stay concurrent.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

WRITES = frozenset({"PUT", "POST", "DELETE"})


class AtomicWrites:
    """WSGI middleware: one store-changing request at a time (the whole response is produced under the lock)."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") not in WRITES:
            return self.app(environ, start_response)
        with self.lock:
            return list(self.app(environ, start_response))


def main() -> None:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import run_simple

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    args = parser.parse_args()
    os.environ.setdefault("MOTO_PORT", str(args.port))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(args.host, args.port, AtomicWrites(app), threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
