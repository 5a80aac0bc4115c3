"""S3 through botocore, in the shape of obstore's calls: for processes forked after obstore's runtime started.

obstore runs every request on one tokio runtime per process, started by its first request. ``fork`` copies
only the calling thread, so a child forked after that (Gunicorn and Celery prefork workers, ``multiprocessing``
with the fork start method, PySpark's worker daemon) inherits a runtime without its threads, and its first
request waits forever. Tokio documents fork as unsupported and obstore offers no way to start another runtime.
A child forked after the parent used obstore therefore sends its S3 requests through botocore (pure Python,
its clients made per process, :func:`client`), and an object-store storage made in the parent and used in the
child switches over on its first request (``maintd.storage.objectstore``). GCS and Azure have no such second
client; a forked child refuses them with :class:`~maintd.errors.ForkedProcessError`, which says what to do.

The functions take a :class:`BotoStore` where obstore takes a store, and answer as obstore does. A missing key is
a ``FileNotFoundError``, a lost conditional write an ``AlreadyExistsError`` or ``PreconditionError``, any other
failure an obstore ``GenericError`` whose message carries the S3 error code and HTTP status, which
:func:`~maintd.storage.objectstore.storage_error` reads as it reads obstore's own.
"""

from __future__ import annotations

import builtins
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import obstore.exceptions as obx

_KEYS = ("aws_endpoint", "aws_access_key_id", "aws_secret_access_key", "aws_session_token", "aws_region",
         "aws_virtual_hosted_style_request")
_clients: dict[tuple[object, ...], Any] = {}
_lock = threading.Lock()
_obstore_started = False
"""Whether this process (or the one it was forked from) may have started obstore's runtime."""
_forked_after_obstore = False


def obstore_used() -> None:
    """Note that this process is about to use obstore: a child forked from now on must not."""
    global _obstore_started
    _obstore_started = True


def forked_after_obstore() -> bool:
    """Whether this process was forked (at any depth) from one that had used obstore."""
    return _forked_after_obstore


def _after_fork_in_child() -> None:
    """The parent's clients share its connections, and its lock may be held by one of its threads."""
    global _lock, _forked_after_obstore
    _lock = threading.Lock()
    _clients.clear()
    _forked_after_obstore = _forked_after_obstore or _obstore_started


os.register_at_fork(after_in_child=_after_fork_in_child)


def client(options: Mapping[str, str], *, retries: bool = True) -> Any:
    """A botocore S3 client for ``options`` (endpoint, keys, region; else botocore's default chain: environment,
    web identity/IRSA, instance profile), made once per process and options; ``retries=False``: one attempt
    per request, for conditional creates (a retried create whose first copy applied answers "already exists")."""
    key = (retries, *((k, options[k]) for k in _KEYS if options.get(k)))
    with _lock:
        made = _clients.get(key)
    if made is not None:
        return made
    import botocore.config
    import botocore.session

    o = {k: options[k] for k in _KEYS if options.get(k)}
    virtual = o.get("aws_virtual_hosted_style_request", "").lower() in ("1", "true", "yes")
    attempts = {"max_attempts": 3, "mode": "standard"} if retries else {"total_max_attempts": 1}
    config = botocore.config.Config(retries=attempts, connect_timeout=5, read_timeout=60,
                                    s3={"addressing_style": "virtual" if virtual else
                                        "path" if o.get("aws_endpoint") else "auto"})
    made = botocore.session.get_session().create_client(
        "s3", region_name=o.get("aws_region") or "us-east-1", endpoint_url=o.get("aws_endpoint"),
        aws_access_key_id=o.get("aws_access_key_id"), aws_secret_access_key=o.get("aws_secret_access_key"),
        aws_session_token=o.get("aws_session_token"), config=config)
    with _lock:
        return _clients.setdefault(key, made)


@dataclass(frozen=True)
class BotoStore:
    """An S3 bucket and prefix, as an obstore store names them."""

    bucket: str
    prefix: str
    options: Mapping[str, str]
    retries: bool = True

    def key(self, path: str) -> str:
        return f"{self.prefix}/{path}" if self.prefix else path

    def path(self, key: str) -> str:
        return key[len(self.prefix) + 1:] if self.prefix else key

    @property
    def client(self) -> Any:
        return client(self.options, retries=self.retries)


@dataclass(frozen=True)
class Got:
    """What :func:`get` answers: the bytes and the object's meta, as obstore's ``GetResult``."""

    data: bytes
    meta: Mapping[str, Any]

    def bytes(self) -> bytes:
        return self.data


def _failure(exc: Exception, op: str, path: str) -> Exception:
    """obstore's error for a botocore error of ``op`` on ``path``."""
    import botocore.exceptions as bx

    if isinstance(exc, bx.ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if code in ("NoSuchKey", "NotFound", "404") or (status == 404 and code != "NoSuchBucket"):
            return FileNotFoundError(f"{path} not found")
        if code == "PreconditionFailed" or status == 412:
            return obx.PreconditionError(f"{op} {path}: 412 PreconditionFailed")
        return obx.GenericError(f"{op} {path}: {status} {code} {error.get('Message', '')}".strip())
    if isinstance(exc, bx.NoCredentialsError | bx.PartialCredentialsError | bx.CredentialRetrievalError):
        return obx.GenericError(f"{op} {path}: credential error: {type(exc).__name__}")
    if isinstance(exc, bx.EndpointConnectionError | bx.ConnectTimeoutError | bx.ReadTimeoutError |
                  bx.ConnectionClosedError):
        return obx.GenericError(f"{op} {path}: error sending request: connection refused or timed out "
                                f"({type(exc).__name__})")
    return obx.GenericError(f"{op} {path}: {type(exc).__name__}: {exc}")


def _call(op: str, path: str, fn: Any) -> Any:
    import botocore.exceptions as bx

    try:
        return fn()
    except (bx.BotoCoreError, bx.ClientError) as exc:
        raise _failure(exc, op, path) from None


def put(store: BotoStore, path: str, data: bytes, *, mode: Any = "overwrite") -> None:
    """Write an object: ``mode`` ``"overwrite"``, ``"create"`` (only if absent) or ``{"e_tag": ...}`` (only if
    still that version), as obstore's ``put`` takes it."""
    extra: dict[str, str] = {}
    if mode == "create":
        extra["IfNoneMatch"] = "*"
    elif isinstance(mode, Mapping) and mode.get("e_tag"):
        extra["IfMatch"] = str(mode["e_tag"])
    try:
        _call("put", path, lambda: store.client.put_object(Bucket=store.bucket, Key=store.key(path), Body=data,
                                                           **extra))
    except obx.PreconditionError:
        if mode == "create":
            raise obx.AlreadyExistsError(f"put {path}: the object exists") from None
        raise


def _meta(store: BotoStore, key: str, item: Mapping[str, Any]) -> dict[str, Any]:
    modified: datetime = item["LastModified"]
    return {"path": store.path(key), "size": int(item.get("Size", item.get("ContentLength", 0))),
            "last_modified": modified, "e_tag": item.get("ETag"), "version": item.get("VersionId")}


def get(store: BotoStore, path: str) -> Got:
    got = _call("get", path, lambda: store.client.get_object(Bucket=store.bucket, Key=store.key(path)))
    return Got(_call("get", path, lambda: got["Body"].read()), _meta(store, store.key(path), got))


def head(store: BotoStore, path: str) -> dict[str, Any]:
    got = _call("head", path, lambda: store.client.head_object(Bucket=store.bucket, Key=store.key(path)))
    return _meta(store, store.key(path), got)


def _pages(store: BotoStore, prefix: str | None, delimiter: bool, page: int = 1000) -> Iterator[dict[str, Any]]:
    key = store.key(prefix or "") if prefix else (f"{store.prefix}/" if store.prefix else "")
    kwargs: dict[str, Any] = {"Bucket": store.bucket, "Prefix": key, "MaxKeys": max(1, min(1000, page))}
    if delimiter:
        kwargs["Delimiter"] = "/"
        if kwargs["Prefix"] and not kwargs["Prefix"].endswith("/"):
            kwargs["Prefix"] += "/"
    while True:
        resp = _call("list", prefix or "", lambda: store.client.list_objects_v2(**kwargs))
        yield resp
        if not resp.get("IsTruncated"):
            return
        kwargs["ContinuationToken"] = resp["NextContinuationToken"]


def list(store: BotoStore, prefix: str | None = None, *,
         chunk_size: int = 1000) -> Iterator[builtins.list[dict[str, Any]]]:
    """Every object below ``prefix``, in pages of up to ``chunk_size``."""
    for resp in _pages(store, prefix, delimiter=False, page=chunk_size):
        yield [_meta(store, item["Key"], item) for item in resp.get("Contents", [])]


def list_with_delimiter(store: BotoStore, prefix: str | None = None) -> dict[str, Any]:
    """The objects directly below ``prefix`` and the "directories" there (common prefixes)."""
    objects: builtins.list[dict[str, Any]] = []
    prefixes: builtins.list[str] = []
    for resp in _pages(store, prefix, delimiter=True):
        objects += [_meta(store, item["Key"], item) for item in resp.get("Contents", [])]
        prefixes += [store.path(p["Prefix"]) for p in resp.get("CommonPrefixes", [])]
    return {"objects": objects, "common_prefixes": prefixes}


def delete(store: BotoStore, paths: str | Sequence[str]) -> None:
    """Delete one object, or up to 1,000 in one ``DeleteObjects`` request (a missing key is no error)."""
    if isinstance(paths, str):
        _call("delete", paths, lambda: store.client.delete_object(Bucket=store.bucket, Key=store.key(paths)))
        return
    objects = [{"Key": store.key(p)} for p in paths]
    resp = _call("delete", paths[0] if paths else "", lambda: store.client.delete_objects(
        Bucket=store.bucket, Delete={"Objects": objects, "Quiet": True}))
    errors = resp.get("Errors") or []
    if errors:
        first = errors[0]
        raise obx.GenericError(f"delete {store.path(first.get('Key', ''))}: {first.get('Code', '')} "
                               f"{first.get('Message', '')} ({len(errors)} of {len(objects)} keys not deleted)")


__all__ = ["BotoStore", "Got", "client", "delete", "forked_after_obstore", "get", "head", "list",
           "list_with_delimiter", "obstore_used", "put"]
