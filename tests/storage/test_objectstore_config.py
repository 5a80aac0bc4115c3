"""Object-store URIs and options without a server: schemes, buckets, prefixes, option names, redaction."""

from __future__ import annotations

import pytest

from maintd.errors import InvalidInputError
from maintd.storage import StorageOptions, storage_for_uri
from maintd.storage.objectstore import ObjectStoreStorage, split_uri


@pytest.mark.parametrize(("uri", "expected"), [
    ("s3://lake/warehouse/t", ("s3", "lake", "warehouse/t")),
    ("s3a://lake/t", ("s3", "lake", "t")),
    ("gs://bkt/wh/t", ("gcs", "bkt", "wh/t")),
    ("az://container/wh/t", ("azure", "container", "wh/t")),
    ("abfss://container@acct.dfs.core.windows.net/wh/t", ("azure", "container", "wh/t")),
])
def test_uris_name_family_bucket_and_prefix(uri: str, expected: tuple[str, str, str]) -> None:
    assert split_uri(uri) == expected


def test_a_uri_without_bucket_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="names no bucket"):
        split_uri("s3:///t")


def test_gcs_and_azure_storages_are_built_from_options_with_secrets_hidden() -> None:
    gcs = storage_for_uri("gs://bkt/wh/t")
    assert isinstance(gcs, ObjectStoreStorage) and gcs.full_path("_log/x.json") == "bkt/wh/t/_log/x.json"
    az = ObjectStoreStorage("abfss://cont@acct.dfs.core.windows.net/wh/t",
                            {"azure_storage_account_key": "c2VjcmV0LWtleQ=="})
    assert az.options["azure_storage_account_name"] == "acct"
    assert type(az.filesystem).__name__ == "AzureFileSystem" and az.full_path("a/b") == "cont/wh/t/a/b"
    assert "c2VjcmV0LWtleQ" not in repr(az) and "***" in repr(az)


def test_unknown_option_names_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="unknown storage option"):
        ObjectStoreStorage("s3://b/t", {"aws_not_an_option": "1", "aws_access_key_id": "k"})


def test_storage_options_hide_every_secret() -> None:
    opts = StorageOptions.of({"aws_secret_access_key": "s1", "aws_session_token": "s2", "aws_region": "r",
                              "azure_storage_sas_key": "s3", "google_service_account_key": "s4",
                              "aws_access_key_id": "AKIA"})
    shown = repr(opts)
    assert not any(s in shown for s in ("s1", "s2", "s3", "s4")) and "AKIA" in shown and "'r'" in shown
