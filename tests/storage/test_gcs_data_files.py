"""GCS data files honour the ``google_service_account`` storage option, as the log does.

A fake GCS endpoint (an HTTP server on loopback holding the objects of one bucket) stands in for Google,
with a service account whose key this test makes. A client using the service account signs its bearer
tokens with that key (a JWT whose issuer is the account); the data file's write and read must carry such a
token, checked against the account's public key. pyarrow's ``GcsFileSystem`` would use Google's default
credentials instead (maintd/storage/objectfs.py says why the bytes go through obstore for such a table).
"""

from __future__ import annotations

import base64
import json
import pickle
import threading
from collections.abc import Iterator
from email.utils import formatdate
from hashlib import md5
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from maintd.storage.objectfs import ObjectStoreHandler
from maintd.storage.objectstore import ObjectStoreStorage

ACCOUNT = "writer@p.iam.gserviceaccount.com"


class FakeGcs(BaseHTTPRequestHandler):
    objects: dict[str, bytes]
    seen: list[tuple[str, str, str]]

    def log_message(self, *args: Any) -> None:
        return None

    def _reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
               length: int | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _object_headers(self, data: bytes) -> dict[str, str]:
        return {"ETag": f'"{md5(data).hexdigest()}"', "Last-Modified": formatdate(usegmt=True)}

    def _record(self) -> None:
        self.seen.append((self.command, unquote(self.path), self.headers.get("Authorization", "")))

    def do_PUT(self) -> None:
        data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._record()
        self.objects[self.path.split("?")[0]] = data
        self._reply(200, b"", self._object_headers(data))

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        self._record()
        data = self.objects.get(self.path.split("?")[0])
        if data is None:
            self._reply(404, b"<Error><Code>NoSuchKey</Code></Error>")
            return
        headers = self._object_headers(data)
        rng = self.headers.get("Range")
        if rng and self.command == "GET":
            first, _, last = rng.removeprefix("bytes=").partition("-")
            start, end = int(first), min(int(last) if last else len(data) - 1, len(data) - 1)
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            self._reply(206, data[start:end + 1], headers)
            return
        self._reply(200, data if self.command == "GET" else b"", headers, len(data))


@pytest.fixture
def fake_gcs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[dict[str, str], list[Any], Any]]:
    """Storage options of a table on the fake endpoint with a service account, the requests the endpoint saw,
    and the account's public key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    handler = type("Handler", (FakeGcs,), {"objects": {}, "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    key = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    account = tmp_path / "service-account.json"
    account.write_text(json.dumps({"type": "service_account", "project_id": "p", "private_key_id": "k1",
                                   "private_key": key, "client_email": ACCOUNT,
                                   "client_id": "1", "token_uri": f"{endpoint}/token"}))
    for var in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_SERVICE_ACCOUNT", "GOOGLE_SERVICE_ACCOUNT_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")  # no metadata server to fall back on
    options = {"google_service_account": str(account), "google_base_url": endpoint, "google_allow_http": "true"}
    try:
        yield options, handler.seen, private.public_key()
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.timeout(60)  # pyarrow's GcsFileSystem, looking for default credentials that are not there, hangs
def test_data_files_of_a_gcs_table_are_written_and_read_with_its_service_account(
        fake_gcs: tuple[dict[str, str], list[Any], Any]) -> None:
    options, seen, public_key = fake_gcs
    storage = ObjectStoreStorage("gs://lake/wh/t", options)
    rows = pa.table({"id": pa.array(range(100), pa.int64()), "name": [f"n{i}" for i in range(100)]})
    path = storage.full_path("bucket-00000/delta-L0-x.parquet")
    with storage.filesystem.open_output_stream(path) as sink:
        pq.write_table(rows, sink)
    with storage.filesystem.open_input_file(path) as source:
        assert pq.read_table(source).equals(rows)
    data = [(method, auth) for method, url, auth in seen if url.endswith("/bucket-00000/delta-L0-x.parquet")]
    assert {m for m, _ in data} >= {"PUT", "GET"}, [(m, u) for m, u, _ in seen]
    for method, auth in data:
        assert signed_by_the_account(auth, public_key), method
    assert storage.filesystem.get_file_info([path])[0].size == data_size(storage, path)


def signed_by_the_account(auth: str, public_key: Any) -> bool:
    """Whether ``auth`` is a bearer JWT issued by :data:`ACCOUNT` and signed with its key."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    scheme, _, token = auth.partition(" ")
    if scheme != "Bearer" or token.count(".") != 2:
        return False
    header, payload, signature = token.split(".")

    def b64(part: str) -> bytes:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))

    try:
        public_key.verify(b64(signature), f"{header}.{payload}".encode(), padding.PKCS1v15(), hashes.SHA256())
    except InvalidSignature:
        return False
    return bool(json.loads(b64(payload)).get("iss") == ACCOUNT)


def data_size(storage: ObjectStoreStorage, path: str) -> int:
    with storage.filesystem.open_input_file(path) as source:
        return int(source.size())


def test_the_service_account_filesystem_survives_pickling(fake_gcs: tuple[dict[str, str], list[Any], Any]) -> None:
    """Spark ships it with a task: the copy reaches the same store with the same service account."""
    options, _, _ = fake_gcs
    fs = ObjectStoreStorage("gs://lake/t", options).filesystem
    assert isinstance(fs, pafs.PyFileSystem) and isinstance(fs.handler, ObjectStoreHandler)
    copy = pickle.loads(pickle.dumps(fs))
    assert copy.handler.bucket == "lake"
    assert copy.handler.store.config["service_account"] == options["google_service_account"]


def test_without_a_service_account_gcs_data_files_use_the_native_filesystem(
        fake_gcs: tuple[dict[str, str], list[Any], Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Google's default credentials (``GOOGLE_APPLICATION_CREDENTIALS``, which the option may just repeat) are
    what pyarrow's own GcsFileSystem uses: it stays the data-file path then."""
    options, _, _ = fake_gcs
    endpoint = {k: v for k, v in options.items() if k != "google_service_account"}
    assert type(ObjectStoreStorage("gs://lake/t", endpoint).filesystem).__name__ == "GcsFileSystem"
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", options["google_service_account"])
    assert type(ObjectStoreStorage("gs://lake/t", options).filesystem).__name__ == "GcsFileSystem"
