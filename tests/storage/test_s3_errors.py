"""Object stores, bad input and lost answers: each mistake gets one clear error naming the URI and what to set,
never a secret; a conditional put whose answer is lost is settled by reading the commit back.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from maintd import Table
from maintd.errors import (
    BucketNotFoundError,
    ConditionalPutUnsupportedError,
    ConfigError,
    StorageConfigError,
    StorageCredentialsError,
    StorageUnreachableError,
    UnknownSchemeError,
)
from maintd.storage import (
    carry_storage,
    clear_storage_options,
    configure_storage,
    resolve_options,
    storage_for_uri,
)
from maintd.storage.faulty import Fault, FaultPlan
from maintd.table.log.tablelog import commit_path

SCHEMA = "id:int64!,name:string"


@pytest.fixture
def no_aws_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION",
                "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ALLOW_HTTP", "AWS_PROFILE",
                "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    yield
    clear_storage_options()


def secret(s3_server: Any) -> str:
    return str(s3_server.options["aws_secret_access_key"])


def test_an_unknown_scheme_names_the_uri_and_the_schemes_there_are() -> None:
    with pytest.raises(UnknownSchemeError) as err:
        Table.open("hdfs://namenode/warehouse/t")
    assert "hdfs://namenode/warehouse/t" in str(err.value) and "s3://" in str(err.value)
    assert isinstance(err.value, StorageConfigError)


def test_missing_credentials_say_what_to_set(s3_server: Any, no_aws_env: None) -> None:
    bucket = s3_server.create_bucket()
    configure_storage(f"s3://{bucket}", {"aws_endpoint": s3_server.endpoint, "aws_allow_http": "true"})
    with pytest.raises(StorageCredentialsError) as err:
        Table.create(f"s3://{bucket}/t", SCHEMA, primary_key="id")
    assert f"s3://{bucket}/t" in str(err.value) and "AWS_ACCESS_KEY_ID" in str(err.value)
    assert "; set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY" in str(err.value) and "***" not in str(err.value)


def test_a_missing_bucket_is_named(s3_server: Any, no_aws_env: None) -> None:
    configure_storage("s3://", s3_server.options)
    for call in (lambda: Table.create("s3://no-such-bucket-here/t", SCHEMA, primary_key="id"),
                 lambda: Table.open("s3://no-such-bucket-here/t")):
        with pytest.raises(BucketNotFoundError) as err:
            call()
        assert "s3://no-such-bucket-here/t" in str(err.value) and "bucket does not exist" in str(err.value)
        assert secret(s3_server) not in str(err.value)


def test_a_store_refusing_conditional_put_is_refused_unless_a_commit_lock_is_chosen(s3_server: Any,
                                                                                    no_aws_env: None) -> None:
    bucket = s3_server.create_bucket()
    configure_storage(f"s3://{bucket}", {**s3_server.options, "aws_conditional_put": "disabled"})
    with pytest.raises(ConditionalPutUnsupportedError) as err:
        Table.create(f"s3://{bucket}/t", SCHEMA, primary_key="id")
    assert f"s3://{bucket}/t" in str(err.value) and "commit_lock=state_store" in str(err.value)
    assert not storage_for_uri(f"s3://{bucket}/t").walk(), "nothing was written"
    configure_storage(f"s3://{bucket}", {**s3_server.options, "aws_conditional_put": "disabled",
                                         "commit_lock": "state_store"})
    with pytest.raises(ConfigError, match="state store"):
        Table.create(f"s3://{bucket}/t", SCHEMA, primary_key="id")


def test_an_unreachable_endpoint_names_the_setting(s3_server: Any, no_aws_env: None) -> None:
    from servers import free_port

    configure_storage("s3://", {**s3_server.options, "aws_endpoint": f"http://127.0.0.1:{free_port()}"})
    with pytest.raises(StorageUnreachableError) as err:
        Table.open("s3://some-bucket/t")
    assert "s3://some-bucket/t" in str(err.value) and "AWS_ENDPOINT_URL" in str(err.value)
    assert err.value.retryable and secret(s3_server) not in str(err.value)


def test_plain_http_must_be_allowed(s3_server: Any, no_aws_env: None) -> None:
    configure_storage("s3://", {k: v for k, v in s3_server.options.items() if k != "aws_allow_http"})
    with pytest.raises(StorageConfigError) as err:
        Table.open("s3://some-bucket/t")
    assert "allow" in str(err.value).lower() and "http" in str(err.value)


def test_explicit_options_override_the_environment_and_secrets_never_show(s3_server: Any,
                                                                          monkeypatch: pytest.MonkeyPatch,
                                                                          no_aws_env: None) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "from-env")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret-value")
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    assert resolve_options("s3://b/t")["aws_access_key_id"] == "from-env"
    configure_storage("s3://b", s3_server.options)
    configure_storage("s3://b/special", {"aws_region": "eu-central-1"})
    opts = resolve_options("s3://b/t")
    assert opts["aws_access_key_id"] == s3_server.options["aws_access_key_id"]
    assert opts["aws_secret_access_key"] == secret(s3_server) and opts["aws_region"] == s3_server.options["aws_region"]
    assert resolve_options("s3a://b/special/t")["aws_region"] == "eu-central-1", "the longest prefix wins"
    carried = carry_storage("s3://b/t")
    assert carried is not None and pickle.loads(pickle.dumps(carried)) == carried
    shown = repr(carried) + str(opts) + repr(storage_for_uri("s3://b/t"))
    assert secret(s3_server) not in shown and "env-secret-value" not in shown and "***" in shown


def test_a_lost_answer_to_a_conditional_put_is_settled_by_reading_back(s3_root: str) -> None:
    uri = f"{s3_root}/ambiguous"
    Table.create(uri, SCHEMA, primary_key="id")
    landed: list[bool] = []
    plan = FaultPlan([Fault("fail_after", op="put_if_absent", path="_log/*.json", times=2),
                      Fault("fail", op="put_if_absent", path="_log/*.json", nth=3)],
                     observer=lambda op, path, data, result: landed.append(bool(result)) if op == "put_if_absent"
                     else None)
    table = Table(plan.wrap(storage_for_uri(uri)))
    v1 = table.upsert(pa.table({"id": [1], "name": ["a"]}))  # applied, answer lost: found by reading back
    v2 = table.upsert(pa.table({"id": [2], "name": ["b"]}))  # applied, answer lost
    v3 = table.upsert(pa.table({"id": [3], "name": ["c"]}))  # refused before it applied: published again
    assert (v1, v2, v3) == (1, 2, 3)
    fresh = Table.open(uri)
    assert fresh.version == 3 and sorted(fresh.read().column("id").to_pylist()) == [1, 2, 3]
    assert [f.kind for f in plan.fired] == ["fail_after", "fail_after", "fail"]
    assert all(fresh.storage.exists(commit_path(v)) for v in range(4))
    assert not fresh.storage.exists(commit_path(4))
