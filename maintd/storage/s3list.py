"""The first keys of an S3 prefix in one bounded request (``ListObjectsV2`` with ``MaxKeys``), through botocore.

obstore (``object_store``) lists S3 in pages of up to 1,000 keys and offers no page size, so "the first
name below ``_log/``" would cost a 1,000-key answer once the history is that long: time that grows with
the history up to 1,000 versions and stays at its worst beyond. botocore, the AWS SDK's own request layer,
asks for exactly the keys wanted, so the latest-version lookup costs the same at 10 versions as at 10,000.

Clients are built from the same resolved options as the object store (endpoint, keys, region; else
botocore's default chain: environment, web identity/IRSA, instance profile) and shared per options and process
(:func:`maintd.storage.botos3.client`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from maintd.errors import (
    BucketNotFoundError,
    MaintdError,
    StorageCredentialsError,
    StorageError,
    StorageUnreachableError,
)
from maintd.storage import botos3


def first_keys(uri: str, bucket: str, prefix: str, limit: int, options: Mapping[str, str],
               what_to_set: str) -> list[tuple[str, int, int]]:
    """``(key, size, last-modified ms)`` of the first ``limit`` keys below ``prefix`` (lexical order).

    Raises the same errors as the object-store storage: missing bucket, credentials, unreachable endpoint.
    """
    import botocore.exceptions as bx

    try:
        resp = botos3.client(options).list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=limit)
    except bx.ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code == "NoSuchBucket":
            raise BucketNotFoundError(f"table {uri}: the bucket does not exist (list {prefix}); create it, or fix "
                                      "the table URI", uri=uri) from None
        if code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"):
            raise StorageCredentialsError(f"table {uri}: the store refused the request ({code}); set {what_to_set}",
                                          uri=uri) from None
        raise StorageError(f"table {uri}: list {prefix} failed: {code or exc}") from None
    except (bx.NoCredentialsError, bx.PartialCredentialsError, bx.CredentialRetrievalError) as exc:
        raise StorageCredentialsError(f"table {uri}: no S3 credentials found ({type(exc).__name__}); set "
                                      f"{what_to_set}", uri=uri) from None
    except (bx.EndpointConnectionError, bx.ConnectTimeoutError, bx.ReadTimeoutError) as exc:
        raise StorageUnreachableError(f"table {uri}: the store's endpoint cannot be reached ({type(exc).__name__}); "
                                      "check AWS_ENDPOINT_URL or the storage option aws_endpoint", uri=uri) from None
    except (bx.BotoCoreError, OSError) as exc:
        if isinstance(exc, MaintdError):
            raise
        raise StorageError(f"table {uri}: list {prefix} failed: {type(exc).__name__}") from None
    out: list[tuple[str, int, int]] = []
    for item in resp.get("Contents", []):
        modified: datetime = item["LastModified"]
        out.append((str(item["Key"]), int(item["Size"]), int(modified.timestamp() * 1000)))
    return out


__all__ = ["first_keys"]
