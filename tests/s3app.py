"""Start the moto S3 server with its writes made atomic: ``python tests/s3app.py -H HOST -p PORT``.

moto checks ``If-None-Match: *`` and then stores the object in two steps, on a server that answers each
request in its own thread, so two creates of one key that arrive together can both succeed (seen in the model
check on S3: two writers each told that their commit landed at the same version). S3 itself makes a
conditional put atomic, and the log's commit protocol rests on exactly that. This launcher runs moto's own
application as ``moto_server`` does, with two changes:

* requests that change the store (PUT, POST, DELETE) are served one at a time, so a conditional create is
  atomic as on S3. Reads stay concurrent.
* ``ListObjectsV2`` is answered from a sorted index of each bucket's key names, as S3 serves listings:
  moto itself walks and sorts every key of the bucket for each listing, so its answer to "the first 8 keys
  below ``t/_log/``" takes time that grows with the number of keys in the bucket, which S3's does not (the
  latest-version lookup's benchmark would measure moto, not the request). The index starts at the listing's
  start point (prefix, ``StartAfter`` or continuation token) and reads only the keys it answers with (a
  common prefix is skipped in one step); prefix, delimiter, start-after, continuation tokens, ``MaxKeys``
  and delete markers mean what they mean to moto (tests/storage/test_s3_server_listing.py compares the
  two on the same buckets). ``ListObjects`` (v1) is moto's own.

Real stores have habits moto hides; each can be switched on per bucket, while the server runs, by a
``PUT /_maintd/modes/<bucket>`` with a JSON object (``{}`` switches them off; :meth:`S3Server.set_modes`):

* ``"unordered": true``: ``ListObjectsV2`` answers in no lexical order (a fixed pseudo-random order of the
  names, paginated with continuation tokens), as S3 Express One Zone directory buckets and some
  S3-compatible servers do;
* ``"conflicts": true``: a conditional PUT (``If-None-Match`` or ``If-Match``) of a key while another
  conditional PUT of that key is in flight is answered ``409 ConditionalRequestConflict``, as S3 does;
* ``"slow_ms": N`` (with ``"slow_methods"``, default every method, and ``"slow_keys"``, a substring of the
  key, default any): the request waits N ms before it is served, inside the window of a conditional PUT.
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

WRITES = frozenset({"PUT", "POST", "DELETE"})
TRACKED = ("__setitem__", "__delitem__", "setlist", "pop", "setdefault", "update", "clear", "popitem")
"""The methods of moto's key store that change which names it holds (each keeps the index in step)."""


MODES: dict[str, dict[str, Any]] = {}
"""Per bucket, the habits of real stores switched on (see the module docstring)."""
MODES_PATH = "/_maintd/modes/"
CONFLICT_BODY = ('<?xml version="1.0" encoding="UTF-8"?><Error><Code>ConditionalRequestConflict</Code><Message>A '
                 "conflicting operation occurred. If using PutObject you can retry the request. If using "
                 "multipart upload you should initiate another CreateMultipartUpload request and re-upload each "
                 "part.</Message><Key>{key}</Key><RequestId>maintd-test</RequestId></Error>")


class AtomicWrites:
    """WSGI middleware: one store-changing request at a time (the whole response is produced under the lock),
    and the per-bucket modes of real stores (slow requests, 409 on concurrent conditional writes)."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.lock = threading.Lock()
        self.in_flight: set[tuple[str, str]] = set()
        self.in_flight_lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path: str = environ.get("PATH_INFO", "")
        method = environ.get("REQUEST_METHOD", "")
        if path.startswith(MODES_PATH):
            return self._set_modes(path[len(MODES_PATH):], method, environ, start_response)
        bucket, _, key = path.lstrip("/").partition("/")
        modes = MODES.get(bucket, {})
        conditional = method == "PUT" and bool(environ.get("HTTP_IF_NONE_MATCH") or environ.get("HTTP_IF_MATCH"))
        claimed = False
        if conditional and modes.get("conflicts"):
            with self.in_flight_lock:
                if (bucket, key) in self.in_flight:
                    body = CONFLICT_BODY.format(key=key).encode()
                    start_response("409 Conflict", [("Content-Type", "application/xml"),
                                                    ("Content-Length", str(len(body)))])
                    return [body]
                self.in_flight.add((bucket, key))
                claimed = True
        try:
            slow = modes.get("slow_ms", 0)
            if slow and method in modes.get("slow_methods", (method,)) and modes.get("slow_keys", "") in key:
                time.sleep(slow / 1000)
            if method not in WRITES:
                return self.app(environ, start_response)
            with self.lock:
                return list(self.app(environ, start_response))
        finally:
            if claimed:
                with self.in_flight_lock:
                    self.in_flight.discard((bucket, key))

    @staticmethod
    def _set_modes(bucket: str, method: str, environ: dict[str, Any],
                   start_response: Callable[..., Any]) -> Iterable[bytes]:
        if method == "PUT":
            length = int(environ.get("CONTENT_LENGTH") or 0)
            MODES[bucket] = json.loads(environ["wsgi.input"].read(length) or b"{}")
        elif method == "DELETE":
            MODES.pop(bucket, None)
        body = json.dumps(MODES.get(bucket, {})).encode()
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]


class KeyIndex:
    """The key names of one bucket in sorted order, kept in step with moto's key store."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = sorted(names)
        self.lock = threading.Lock()

    def __reduce__(self) -> tuple[Any, ...]:  # copies (moto deep-copies buckets) get an index of their own
        return KeyIndex, (list(self.names),)

    def add(self, name: str) -> None:
        with self.lock:
            i = bisect.bisect_left(self.names, name)
            if i == len(self.names) or self.names[i] != name:
                self.names.insert(i, name)

    def discard(self, name: str) -> None:
        with self.lock:
            i = bisect.bisect_left(self.names, name)
            if i < len(self.names) and self.names[i] == name:
                del self.names[i]

    def after(self, start: str, past: str | None) -> Iterator[str]:
        """The names from the first one at or after ``start`` (and above ``past``), in order; each step looks
        the next name up again, so a name added or removed meanwhile is neither skipped twice nor repeated."""
        with self.lock:
            i = bisect.bisect_left(self.names, start)
            if past is not None:
                i = max(i, bisect.bisect_right(self.names, past))
            name = self.names[i] if i < len(self.names) else None
        while name is not None:
            yield name
            with self.lock:
                i = bisect.bisect_right(self.names, name)
                name = self.names[i] if i < len(self.names) else None

    def skip_past(self, prefix: str) -> str:
        """A string above every name that starts with ``prefix`` (the listing continues there)."""
        return prefix[:-1] + chr(ord(prefix[-1]) + 1) if prefix else prefix


def _index_of(store: Any) -> KeyIndex:
    index = store.__dict__.get("_sorted_index")
    if index is None:
        index = store.__dict__["_sorted_index"] = KeyIndex(dict.keys(store))
    return index


def install_sorted_listing() -> None:
    """Keep a :class:`KeyIndex` per key store, and answer ``ListObjectsV2`` from it (see the module docstring)."""
    from moto.s3.models import FakeDeleteMarker, FakeKey, FakeTableStorageBucket, S3Backend
    from moto.s3.utils import _VersionedKeyStore as Store

    if getattr(S3Backend.list_objects_v2, "sorted_index", False):
        return
    def tracked(method: str, changes: Callable[[Any, tuple[Any, ...]], list[str]]) -> None:
        original = getattr(Store, method)

        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return original(self, *args, **kwargs)
            finally:
                index = _index_of(self)
                for name in changes(self, args):
                    (index.add if dict.__contains__(self, name) else index.discard)(name)

        setattr(Store, method, wrapper)

    for method in TRACKED:
        if method == "update":
            tracked(method, lambda self, _args: list(dict.keys(self)))
        elif method in ("clear", "popitem"):
            tracked(method, lambda self, _args: [n for n in list(_index_of(self).names)
                                                 if not dict.__contains__(self, n)])
        else:
            tracked(method, lambda _self, args: [args[0]] if args else [])

    original_list = S3Backend.list_objects_v2

    def list_objects_v2(self: Any, bucket: Any, prefix: str | None, delimiter: str | None,
                        continuation_token: str | None, start_after: str | None, max_keys: int) -> Any:
        past = self._pagination_tokens.get(continuation_token) if continuation_token else start_after
        if isinstance(bucket, FakeTableStorageBucket) or (continuation_token and past is None):
            return original_list(self, bucket, prefix, delimiter, continuation_token, start_after, max_keys)
        if max_keys == 0:
            return [], False, None
        if MODES.get(bucket.name, {}).get("unordered"):
            return unordered_page(self, bucket, prefix or "", delimiter, past, max_keys)
        store, prefix, index = bucket.keys, prefix or "", _index_of(bucket.keys)
        out: list[Any] = []
        names = index.after(prefix, past or None)
        while len(out) <= max_keys:
            name = next(names, None)
            if name is None or not name.startswith(prefix):
                break
            rest = name[len(prefix):]
            if delimiter and delimiter in rest:
                folder = f"{prefix}{rest.split(delimiter)[0]}{delimiter}"
                names = index.after(index.skip_past(folder), None)  # past the folder's keys, in one step
                if past is None or folder > past:
                    out.append(folder)
                continue
            key = store.get(name)
            if key is not None and not isinstance(key, FakeDeleteMarker):
                out.append(key)
        if len(out) <= max_keys:
            return out, False, None
        out = out[:max_keys]
        last = out[-1].name if isinstance(out[-1], FakeKey) else out[-1]
        token = hashlib.md5(last.encode("utf-8")).hexdigest()  # moto's own token scheme
        self._pagination_tokens[token] = last
        return out, True, token

    list_objects_v2.sorted_index = True  # type: ignore[attr-defined]
    S3Backend.list_objects_v2 = list_objects_v2


def _scrambled(bucket: str, name: str) -> tuple[str, str]:
    """A fixed pseudo-random position of ``name`` in the listings of an unordered bucket."""
    return hashlib.md5(f"{bucket}/{name}".encode()).hexdigest(), name


def unordered_page(backend: Any, bucket: Any, prefix: str, delimiter: str | None, past: str | None,
                   max_keys: int) -> Any:
    """One page of an unordered listing: every entry below ``prefix`` (keys and, with a delimiter, common
    prefixes) in a fixed scrambled order, from the one after ``past`` (the last name of the previous page)."""
    from moto.s3.models import FakeDeleteMarker

    store, index = bucket.keys, _index_of(bucket.keys)
    entries: dict[str, Any] = {}
    for name in index.after(prefix, None):
        if not name.startswith(prefix):
            break
        rest = name[len(prefix):]
        if delimiter and delimiter in rest:
            folder = f"{prefix}{rest.split(delimiter)[0]}{delimiter}"
            entries[folder] = folder
            continue
        key = store.get(name)
        if key is not None and not isinstance(key, FakeDeleteMarker):
            entries[name] = key
    order = sorted(entries, key=lambda n: _scrambled(bucket.name, n))
    start = 0
    if past is not None:
        start = bisect.bisect_right([_scrambled(bucket.name, n) for n in order], _scrambled(bucket.name, past))
    page = order[start:start + max_keys]
    out = [entries[n] for n in page]
    if start + max_keys >= len(order):
        return out, False, None
    token = hashlib.md5(page[-1].encode("utf-8")).hexdigest()
    backend._pagination_tokens[token] = page[-1]
    return out, True, token


def main() -> None:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import run_simple

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    args = parser.parse_args()
    os.environ.setdefault("MOTO_PORT", str(args.port))
    install_sorted_listing()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(args.host, args.port, AtomicWrites(app), threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
