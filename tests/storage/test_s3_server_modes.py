"""The test S3 server's habits of real stores (tests/s3app.py): unordered listings, 409 ConditionalRequestConflict
on concurrent conditional writes, slow requests. Each is switched on per bucket, and must behave as the real
thing does, or the tests that use it prove less than they claim."""

from __future__ import annotations

import threading
import time
from typing import Any

import botocore.session
import pytest


def client(s3_server: Any) -> Any:
    return botocore.session.get_session().create_client(
        "s3", region_name="us-east-1", endpoint_url=s3_server.endpoint, aws_access_key_id="k",
        aws_secret_access_key="s")


def test_an_unordered_bucket_lists_every_key_once_in_no_lexical_order_across_pages(s3_server: Any) -> None:
    bucket = s3_server.create_bucket()
    s3 = client(s3_server)
    keys = [f"t/_log/{i:05d}.json" for i in range(40)] + ["t/data/a.parquet", "t/data/b.parquet"]
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    s3_server.set_modes(bucket, unordered=True)
    listed: list[str] = []
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="t/_log/", PaginationConfig={
        "PageSize": 7})
    for page in pages:
        listed += [item["Key"] for item in page.get("Contents", [])]
    assert sorted(listed) == sorted(k for k in keys if k.startswith("t/_log/")) and len(listed) == 40
    assert listed != sorted(listed)
    folders = s3.list_objects_v2(Bucket=bucket, Prefix="t/", Delimiter="/")
    assert sorted(p["Prefix"] for p in folders["CommonPrefixes"]) == ["t/_log/", "t/data/"]
    s3_server.set_modes(bucket)  # off again: lexical order, as S3 general purpose buckets list
    first = s3.list_objects_v2(Bucket=bucket, Prefix="t/_log/", MaxKeys=8)
    assert [item["Key"] for item in first["Contents"]] == sorted(keys)[:8]


def test_concurrent_conditional_writes_of_one_key_are_answered_409_conditional_request_conflict(
        s3_server: Any) -> None:
    bucket = s3_server.create_bucket()
    s3 = client(s3_server)
    s3_server.set_modes(bucket, conflicts=True, slow_ms=300, slow_methods=["PUT"])
    answers: list[str] = []
    start = threading.Barrier(3)

    def put(i: int) -> None:
        start.wait()
        try:
            s3.put_object(Bucket=bucket, Key="k", Body=f"{i}".encode(), IfNoneMatch="*")
            answers.append("created")
        except s3.exceptions.ClientError as exc:
            answers.append(str(exc.response["Error"]["Code"]))

    threads = [threading.Thread(target=put, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(answers) == ["ConditionalRequestConflict", "ConditionalRequestConflict", "created"]
    with pytest.raises(s3.exceptions.ClientError, match="PreconditionFailed"):  # after the first: 412 as ever
        s3.put_object(Bucket=bucket, Key="k", Body=b"late", IfNoneMatch="*")


def test_slow_requests_wait_before_they_are_served(s3_server: Any) -> None:
    bucket = s3_server.create_bucket()
    s3 = client(s3_server)
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    s3_server.set_modes(bucket, slow_ms=400, slow_methods=["GET"], slow_keys="k")
    started = time.monotonic()
    s3.get_object(Bucket=bucket, Key="k")
    assert time.monotonic() - started >= 0.4
    started = time.monotonic()
    s3.put_object(Bucket=bucket, Key="other", Body=b"x")
    assert time.monotonic() - started < 0.4
