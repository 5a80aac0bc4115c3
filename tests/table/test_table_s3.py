"""What only tables on S3 do (a moto server started by the tests): the latest version found with one LIST of
``_log/``, an upsert in four requests, and writers racing on a store that answers 409 to concurrent creates.

The Table API, racing committers and real processes on S3 (as on local disk and Azure) are in
test_table_stores.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from racing import race

from maintd import Table
from maintd.table import table as table_module
from maintd.table.log.tablelog import commit_path

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("ds", pa.string()), ("name", pa.string())])


def test_latest_version_is_one_list_request_however_long_the_history(s3_root: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    uri = f"{s3_root}/t"
    table = Table.create(uri, SCHEMA, primary_key="id")
    for i in range(12):
        table.upsert(pa.Table.from_pylist([{"id": i, "ds": "a", "name": "x"}], schema=SCHEMA))
    storage = Table.open(uri).storage
    calls: list[str] = []
    for name in ("list_dir", "list_first", "walk", "exists", "read"):
        real = getattr(storage, name)
        monkeypatch.setattr(storage, name, lambda *a, _n=name, _r=real, **k: (calls.append(_n), _r(*a, **k))[1])
    assert Table(storage).log.latest_version() == 12
    assert calls == ["list_first"]


def calls_of(s3_server: Any, bucket: str, fn: Any) -> tuple[Any, list[tuple[str, str]], list[str]]:
    """What ``fn`` returns, and the requests the server saw for ``bucket`` meanwhile: (method, key) and lines."""
    before = len(s3_server.requests(bucket))
    out = fn()
    lines = s3_server.requests(bucket)[before:]
    return out, [(line.split(" ")[0], line.split(" ")[1].split("?")[0].split("/", 2)[-1]) for line in lines], lines


def test_an_upsert_on_s3_is_four_requests_and_the_next_one_too(s3_root: str, s3_server: Any,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """An upsert of a small batch (one data file) by a writer whose state is not fresh: the lookup (one 8-key
    LIST), the data file in one PUT (no multipart upload), the conditional PUT of the commit, and the read of
    the commit it built on that settles whether it landed. No read of that commit before publishing: the lookup
    has just seen it. The same writer's next upsert builds on the commit it just made, without a lookup, but reads
    that commit before it publishes (the table may have been dropped and created again, or rolled back, since):
    four requests."""
    uri = f"{s3_root}/t"
    bucket = s3_root[len("s3://"):]
    Table.create(uri, SCHEMA, primary_key="id", buckets=1, properties={"log.checkpoint.interval": 100})
    table = Table.open(uri)
    table.snapshot()
    with monkeypatch.context() as m:
        m.setattr(table_module, "FRESH_BASE_SECONDS", 0.0)  # as if the state were older than the window
        version, calls, lines = calls_of(s3_server, bucket, lambda: table.upsert(
            pa.Table.from_pylist([{"id": 0, "ds": "a", "name": "x"}], schema=SCHEMA)))
    assert version == 1 and len(calls) == 4, lines
    assert calls[0][0] == "GET" and "list-type=2" in lines[0] and "max-keys=8" in lines[0]
    assert calls[1][0] == "PUT" and calls[1][1].endswith(".parquet") and "uploadId" not in lines[1]
    assert calls[2] == ("PUT", f"t/{commit_path(1)}")
    assert calls[3] == ("GET", f"t/{commit_path(0)}")
    version, calls, lines = calls_of(s3_server, bucket, lambda: table.upsert(
        pa.Table.from_pylist([{"id": 1, "ds": "a", "name": "y"}], schema=SCHEMA)))
    assert version == 2 and len(calls) == 4, lines
    assert calls[0][0] == "PUT" and calls[0][1].endswith(".parquet")
    assert calls[1:] == [("GET", f"t/{commit_path(1)}"), ("PUT", f"t/{commit_path(2)}"),
                         ("GET", f"t/{commit_path(1)}")]
    assert {r["id"] for r in Table.open(uri).read().to_pylist()} == {0, 1}


@pytest.mark.slow
def test_writers_racing_on_a_store_that_answers_409_to_concurrent_creates_lose_no_commit(
        s3_root: str, s3_server: Any) -> None:
    """S3 answers ``409 ConditionalRequestConflict`` to a conditional PUT of a key while another is in flight
    (the test server does when asked, with the commits' PUTs slowed so that they overlap): the writer that got it
    takes it as a lost race, and every acknowledged commit is in the table at a version of its own."""

    bucket = s3_root[len("s3://"):]
    uri = f"{s3_root}/t"
    Table.create(uri, SCHEMA, primary_key="id", buckets=1)
    s3_server.set_modes(bucket, conflicts=True, slow_ms=80, slow_methods=["PUT"], slow_keys="/_log/1844")
    acked: list[int] = []
    tables = [Table.open(uri) for _ in range(4)]

    def write(w: int) -> None:
        for i in range(4):
            acked.append(tables[w].upsert(pa.Table.from_pylist([{"id": w * 10 + i, "ds": "a", "name": "x"}],
                                                                schema=SCHEMA)))

    race(4, write)
    s3_server.set_modes(bucket)
    s3_server.log.flush()
    answered = Path(s3_server.log.name).read_text(errors="replace")
    conflicts = [line for line in answered.splitlines() if f"PUT /{bucket}/t/_log/" in line and '" 409 ' in line]
    assert sorted(acked) == list(range(1, 17)) and conflicts, "no 409 was answered: the race did not happen"
    assert Table.open(uri).read().num_rows == 16
