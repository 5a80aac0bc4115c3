"""Object-store storage (S3, GCS, Azure) through obstore, the Python binding of Rust's ``object_store``.

* **Commits** are conditional puts (``mode="create"``: S3 and Azure ``If-None-Match: *``, GCS
  ``ifGenerationMatch=0``), sent by a client that never retries on its own (a retried create whose first
  copy applied would answer "already exists"): every ambiguous answer is raised, and the log's landing rule
  reads the version back (:mod:`maintd.table.log.landing`).
* **The latest version** is the first commit name of one LIST of ``_log/`` from its start (names descend
  with the version), so finding it costs one request however long the history is
  (:attr:`lists_in_order`). That needs a store that lists in lexical order, which is a property of the
  store: S3 Express One Zone directory buckets (``--x-s3``) list in no order, ``listing_order: unordered``
  says so of any store, and a listing seen out of order makes the storage unordered from then on. The log
  then finds the latest version without relying on order (:mod:`maintd.table.log.tablelog`).
* **Data files** stream through pyarrow's own filesystems (``S3FileSystem``, ``GcsFileSystem``,
  ``AzureFileSystem``), configured from the same options: C++ ranged reads and multipart uploads, no
  local staging, no Python in the byte path (docs/architecture.md, "Object stores").
* A store that does not honour conditional put is found by a probe before the first commit of a process
  and refused with :class:`~maintd.errors.ConditionalPutUnsupportedError`, unless the table opted into the
  state-store commit lock (``commit_lock: state_store``, :mod:`maintd.storage.lock`).

Errors name the URI and what to set (:func:`storage_error`); secrets never appear in them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import obstore
import obstore.exceptions as obx
import pyarrow.fs as pafs
from loguru import logger
from obstore.store import AzureStore, GCSStore, S3Store

from maintd.errors import (
    BucketNotFoundError,
    ConditionalPutUnsupportedError,
    ForkedProcessError,
    InvalidInputError,
    MaintdError,
    StateStoreError,
    StorageConfigError,
    StorageCredentialsError,
    StorageError,
    StorageUnreachableError,
)
from maintd.redaction import register_secrets
from maintd.storage import botos3, s3list
from maintd.storage.base import FileInfo, Storage, check_path
from maintd.storage.lock import commit_lock
from maintd.storage.objectfs import object_store_filesystem
from maintd.storage.options import FAMILIES, StorageOptions, is_secret, resolve_options
from maintd.storage.requests import before_request

T = TypeVar("T")

_CLIENT_KEYS = {"allow_http", "allow_invalid_certificates", "connect_timeout", "timeout", "proxy_url",
                "proxy_ca_certificate", "proxy_excludes", "user_agent", "pool_idle_timeout",
                "pool_max_idle_per_host", "http1_only", "http2_only", "read_timeout", "root_certificate"}
_PREFIX = {"s3": "aws_", "gcs": "google_", "azure": "azure_"}
DEFAULT_CLIENT = {"connect_timeout": "5s", "timeout": "60s"}
_RETRIES = {"max_retries": 3, "retry_timeout": dt.timedelta(seconds=20),
            "backoff": {"init_backoff": dt.timedelta(milliseconds=50), "max_backoff": dt.timedelta(seconds=2),
                        "base": 2}}
_NO_RETRIES = {**_RETRIES, "max_retries": 0}
_WHAT_TO_SET = {
    "s3": "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or an instance or IRSA role), or the storage options "
          "aws_access_key_id/aws_secret_access_key",
    "gcs": "GOOGLE_APPLICATION_CREDENTIALS (or a workload identity), or the storage option google_service_account",
    "azure": "AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY (or a managed identity), or the storage "
             "options azure_storage_account_name/azure_storage_account_key",
}
_ENDPOINT_SETTING = {"s3": "AWS_ENDPOINT_URL or the storage option aws_endpoint",
                     "gcs": "the storage option google_base_url", "azure": "the storage option azure_endpoint"}


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def split_uri(uri: str) -> tuple[str, str, str]:
    """``(family, bucket, prefix)`` of an object-store URI (``abfss://container@account.dfs.../path`` too)."""
    scheme = uri.split("://", 1)[0]
    family = FAMILIES.get(scheme)
    if family is None:
        raise InvalidInputError(f"table URI {uri!r}: {scheme!r} is not an object-store scheme")
    parts = urlsplit(uri)
    bucket = parts.netloc.split("@", 1)[0] if family == "azure" else parts.netloc
    if not bucket:
        raise InvalidInputError(f"table URI {uri!r} names no bucket: write {scheme}://BUCKET/path/to/table")
    return family, bucket, parts.path.strip("/")


def _store_config(family: str, options: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The store config and client options of ``options`` (family prefixes such as ``aws_`` dropped)."""
    config: dict[str, Any] = {}
    client: dict[str, Any] = dict(DEFAULT_CLIENT)
    prefixes = ("azure_storage_", "azure_") if family == "azure" else (_PREFIX[family],)
    for key, value in options.items():
        short = next((key[len(p):] for p in prefixes if key.startswith(p)), key)
        if short in _CLIENT_KEYS:
            client[short] = _truthy(value) if short in ("allow_http", "allow_invalid_certificates", "http1_only",
                                                         "http2_only") else value
        else:
            config[short] = value
    return config, client


def _allow_http(family: str) -> str:
    """How plain http is allowed for ``family``: its environment variable (S3, Azure) or storage option."""
    option = f"the storage option {_PREFIX[family]}allow_http=true"
    env = {"s3": "AWS_ALLOW_HTTP", "azure": "AZURE_ALLOW_HTTP"}.get(family)
    return f"{env}=true or {option}" if env else option


def _build_store(family: str, bucket: str, prefix: str, options: Mapping[str, str], *, retries: bool) -> Any:
    """An obstore store of ``options``; in a process forked after obstore's runtime started, whose requests would
    wait forever, a botocore store for S3 (:mod:`maintd.storage.botos3`) and :class:`ForkedProcessError` for the
    others."""
    if botos3.forked_after_obstore():
        if family != "s3":
            raise ForkedProcessError(
                f"{family} bucket {bucket}: this process was forked after its parent had made object-store requests, "
                "and the object-store client cannot run in a forked child (its runtime's threads are not copied); "
                "start the process with the spawn or forkserver method (multiprocessing.get_context('spawn')), or "
                "open the table only after forking", uri=f"{family}://{bucket}/{prefix}")
        return botos3.BotoStore(bucket, prefix, dict(options), retries)
    botos3.obstore_used()
    config, client = _store_config(family, options)
    retry = _RETRIES if retries else _NO_RETRIES
    cls: Any = {"s3": S3Store, "gcs": GCSStore, "azure": AzureStore}[family]
    try:
        return cls(bucket, prefix=prefix or None, config=config, client_options=client, retry_config=retry)
    except obx.UnknownConfigurationKeyError as exc:
        raise InvalidInputError(f"unknown storage option for a {family} store: {_first_line(exc)}") from None


_SERVICE_ACCOUNT_FILES = ("google_service_account", "service_account", "google_service_account_path",
                          "service_account_path", "google_application_credentials")
_SERVICE_ACCOUNT_KEYS = ("google_service_account_key", "service_account_key")


def _needs_store_fs(family: str, options: Mapping[str, str]) -> bool:
    """Whether data files must go through the obstore store: a GCS service account that pyarrow's
    ``GcsFileSystem`` cannot take. It knows only Google's default credentials (and access tokens); those
    read ``GOOGLE_APPLICATION_CREDENTIALS``, so a service account file that is exactly that one is what it
    uses anyway."""
    if family != "gcs":
        return False
    if any(options.get(k) for k in _SERVICE_ACCOUNT_KEYS):
        return True
    default = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    return any(options.get(k) and options[k] != default for k in _SERVICE_ACCOUNT_FILES)


def _store_fs(family: str, bucket: str, options: dict[str, str]) -> pafs.FileSystem:
    """Data files through the obstore store of ``options`` (:mod:`maintd.storage.objectfs`)."""
    store = _build_store(family, bucket, "", options, retries=True)
    return object_store_filesystem(store, bucket, (_store_handler, (family, bucket, options)))


def _store_handler(family: str, bucket: str, options: dict[str, str]) -> Any:
    return _store_fs(family, bucket, options).handler


def _pyarrow_fs(family: str, options: Mapping[str, str], bucket: str = "") -> pafs.FileSystem:
    """pyarrow's native filesystem for ``family``, from the same options (else its default credential chain);
    for a GCS service account that it cannot take, a filesystem over the obstore store instead."""
    o = options
    if bucket and _needs_store_fs(family, o):
        return _store_fs(family, bucket, dict(o))
    if family == "s3":
        # allow_delayed_open: a file that fits in one part is sent as one PUT when it is closed, instead of
        # a multipart upload (create, part, complete: three round trips for a small level-0 file)
        kw: dict[str, Any] = {"allow_bucket_creation": False, "allow_bucket_deletion": False,
                              "connect_timeout": 5.0, "request_timeout": 60.0, "allow_delayed_open": True}
        if o.get("aws_access_key_id") and o.get("aws_secret_access_key"):
            kw.update(access_key=o["aws_access_key_id"], secret_key=o["aws_secret_access_key"],
                      session_token=o.get("aws_session_token"))
        if o.get("aws_region"):
            kw["region"] = o["aws_region"]
        if o.get("aws_endpoint"):
            ep = urlsplit(o["aws_endpoint"] if "://" in o["aws_endpoint"] else f"https://{o['aws_endpoint']}")
            kw.update(endpoint_override=ep.netloc, scheme=ep.scheme)
        if _truthy(o.get("aws_virtual_hosted_style_request")):
            kw["force_virtual_addressing"] = True
        return pafs.S3FileSystem(**kw)
    if family == "gcs":
        gkw: dict[str, Any] = {}
        if o.get("google_base_url"):
            ep = urlsplit(o["google_base_url"])
            gkw.update(endpoint_override=ep.netloc, scheme=ep.scheme)
        if _truthy(o.get("google_skip_signature")):
            gkw["anonymous"] = True
        return pafs.GcsFileSystem(**gkw)
    akw: dict[str, Any] = {"account_name": o.get("azure_storage_account_name", "")}
    for ours, theirs in (("azure_storage_account_key", "account_key"), ("azure_client_id", "client_id"),
                         ("azure_client_secret", "client_secret"), ("azure_tenant_id", "tenant_id"),
                         ("azure_storage_sas_key", "sas_token")):
        if o.get(ours):
            akw[theirs] = o[ours]
    if akw.get("sas_token"):  # pyarrow appends the token to each URL as it is: it must start with "?"
        akw["sas_token"] = "?" + str(akw["sas_token"]).lstrip("?")
    if o.get("azure_endpoint"):
        ep = urlsplit(o["azure_endpoint"])
        akw.update(blob_storage_authority=ep.netloc, dfs_storage_authority=ep.netloc, blob_storage_scheme=ep.scheme,
                   dfs_storage_scheme=ep.scheme)
    return pafs.AzureFileSystem(**akw)


def _first_line(exc: BaseException) -> str:
    """The first line of an obstore error (the request and status; the debug dump after it is dropped)."""
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:400]


_CREDENTIAL_MARKERS = ("169.254.169.254", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
                       "InvalidToken", "credential", "AccessDenied", "403 Forbidden", "401 Unauthorized",
                       "AuthenticationFailed", "AuthorizationFailure")
_UNREACHABLE_MARKERS = ("error sending request", "connection refused", "Connection refused", "dns error",
                        "timed out", "operation timed out", "tcp connect", "connection reset")


def storage_error(exc: BaseException, *, uri: str, family: str, op: str, path: str) -> BaseException:
    """The maintd error for an obstore error of ``op`` on ``path`` (a ``FileNotFoundError`` stays one)."""
    if isinstance(exc, MaintdError):
        return exc
    line = _first_line(exc)
    where = f"{uri.rstrip('/')}/{path}" if path else uri
    if "NoSuchBucket" in str(exc) or "ContainerNotFound" in str(exc):
        return BucketNotFoundError(
            f"table {uri}: the bucket does not exist ({op} {where}); create it, or fix the table URI", uri=uri)
    if isinstance(exc, FileNotFoundError):
        return FileNotFoundError(f"{where} not found")
    if isinstance(exc, obx.PermissionDeniedError | obx.UnauthenticatedError) or any(
            m in str(exc) for m in _CREDENTIAL_MARKERS):
        return StorageCredentialsError(
            f"table {uri}: the store refused the request or no credentials were found ({op} {where}: {line}); "
            f"set {_WHAT_TO_SET[family]}", uri=uri)
    if any(m in str(exc) for m in _UNREACHABLE_MARKERS):
        return StorageUnreachableError(
            f"table {uri}: the store's endpoint cannot be reached ({op} {where}: {line}); check "
            f"{_ENDPOINT_SETTING[family]}, and that plain http is allowed ({_allow_http(family)}) when the "
            "endpoint is http://", uri=uri)
    return StorageError(f"table {uri}: {op} {where} failed: {line}")


_CREDENTIAL_ENV = ("AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                   "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_PROFILE")


def check_credentials(uri: str, family: str, options: Mapping[str, str]) -> None:
    """Fail early when an S3 table has no credentials at all: no key in the options or the environment, no
    web identity (IRSA) or container credentials, and the instance metadata service switched off
    (``AWS_EC2_METADATA_DISABLED=true``). Otherwise the default chain is asked, and its failure is mapped to
    :class:`StorageCredentialsError` on the first request."""
    if family != "s3" or options.get("aws_access_key_id") or _truthy(options.get("aws_skip_signature")):
        return
    if any(os.environ.get(v) for v in _CREDENTIAL_ENV) or not _truthy(os.environ.get("AWS_EC2_METADATA_DISABLED")):
        return
    raise StorageCredentialsError(
        f"table {uri}: no S3 credentials were found; set {_WHAT_TO_SET['s3']} (the instance metadata service is "
        "disabled by AWS_EC2_METADATA_DISABLED=true, so no instance role can be used)", uri=uri)


_probed: set[tuple[object, ...]] = set()
_probe_lock = threading.Lock()
_unordered: set[tuple[str, str]] = set()
"""(family, bucket) of the stores seen listing out of lexical order by this process."""

DIRECTORY_BUCKET_SUFFIX = "--x-s3"
"""S3 Express One Zone directory buckets are named ``<base>--<zone id>--x-s3``; their listings are not in
lexical order (ListObjectsV2 on a directory bucket)."""
LISTING_ORDERS = ("auto", "lexical", "unordered")
BULK_DELETE_KEYS = 1000
"""Keys in one bulk delete request (S3 ``DeleteObjects`` takes at most 1,000)."""
UPDATE_ATTEMPTS = 50
"""Conditional updates of one object that may lose a race before :meth:`ObjectStoreStorage.update_atomic` gives up."""


def listing_order(uri: str, family: str, bucket: str, options: Mapping[str, str]) -> bool:
    """Whether the store of ``bucket`` lists in lexical order: the ``listing_order`` option (``auto``, the
    default: lexical, except S3 directory buckets and stores seen listing out of order)."""
    raw = options.get("listing_order", "auto").strip().lower() or "auto"
    if raw not in LISTING_ORDERS:
        raise StorageConfigError(f"table {uri}: the storage option listing_order is {raw!r}; use one of "
                                 f"{', '.join(LISTING_ORDERS)}", uri=uri)
    directory = family == "s3" and bucket.endswith(DIRECTORY_BUCKET_SUFFIX)
    if raw == "lexical" and directory:
        raise StorageConfigError(
            f"table {uri}: listing_order=lexical, but {bucket} is an S3 directory bucket, whose listings are not in "
            "lexical order; remove the option (or set it to unordered)", uri=uri)
    if raw == "unordered" or directory:
        return False
    with _probe_lock:
        return raw == "lexical" or (family, bucket) not in _unordered


class ObjectStoreStorage(Storage):
    """A table below a prefix of an S3 bucket, a GCS bucket or an Azure container."""

    lists_in_order = True

    def __init__(self, uri: str, options: Mapping[str, str] | None = None) -> None:
        self._uri = uri.rstrip("/")
        self.family, self.bucket, self.prefix = split_uri(self._uri)
        self.options = StorageOptions.of(options) if options is not None else resolve_options(self._uri)
        account = urlsplit(self._uri).netloc.partition("@")[2].split(".", 1)[0]
        if self.family == "azure" and account and "azure_storage_account_name" not in self.options:
            self.options = StorageOptions.of({**self.options, "azure_storage_account_name": account})
        store_options = self.options.for_store()
        register_secrets(v for k, v in store_options.items() if is_secret(k))  # whoever prints an error of ours
        check_credentials(self._uri, self.family, store_options)
        endpoint = next((store_options[k] for k in ("aws_endpoint", "google_base_url", "azure_endpoint")
                         if store_options.get(k)), "")
        if endpoint.startswith("http://") and not _truthy(store_options.get(f"{_PREFIX[self.family]}allow_http")):
            raise StorageConfigError(
                f"table {self._uri}: the endpoint {endpoint} is plain http, which is not allowed by default; set "
                f"{_allow_http(self.family)} (only for a trusted network), or use https", uri=self._uri)
        self._made_in = 0
        self._stores()
        self._fs: pafs.FileSystem | None = None
        self.use_lock = self.options.get("commit_lock", "").strip().lower().replace("-", "_") == "state_store"
        self.lists_in_order = listing_order(self._uri, self.family, self.bucket, self.options)
        self._order_promised = self.options.get("listing_order", "").strip().lower() == "lexical"

    def __repr__(self) -> str:
        return f"ObjectStoreStorage({self._uri!r}, {self.options!r})"

    def at(self, uri: str) -> Storage:
        return ObjectStoreStorage(uri, self.options)

    @property
    def uri(self) -> str:
        return self._uri

    def _api_of(self) -> Any:
        """The request functions, once the request gate lets one more request go (:mod:`maintd.storage.requests`)."""
        before_request()
        return self._stores()[0]

    def _stores(self) -> tuple[Any, Any, Any]:
        """(the request functions, the store, the store whose requests are never retried) of this process: made
        again on the first request in a forked child (:mod:`maintd.storage.botos3` says why)."""
        if self._made_in != os.getpid():
            options = self.options.for_store()
            self._store = _build_store(self.family, self.bucket, self.prefix, options, retries=True)
            self._commit_store = _build_store(self.family, self.bucket, self.prefix, options, retries=False)
            self._api: Any = botos3 if isinstance(self._store, botos3.BotoStore) else obstore
            self._fs = None  # the parent's pyarrow filesystem shares the parent's connections
            self._made_in = os.getpid()
        return self._api, self._store, self._commit_store

    @property
    def filesystem(self) -> pafs.FileSystem:
        self._stores()
        if self._fs is None:
            self._fs = _pyarrow_fs(self.family, self.options.for_store(), self.bucket)
        return self._fs

    def full_path(self, path: str) -> str:
        check_path(path, root=self._uri)
        return "/".join(p for p in (self.bucket, self.prefix, path) if p)

    def _call(self, op: str, path: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except (obx.BaseError, OSError, RuntimeError, ValueError) as exc:
            raise storage_error(exc, uri=self._uri, family=self.family, op=op, path=path) from None

    # -- commits ------------------------------------------------------------------------------------
    def put_if_absent(self, path: str, data: bytes) -> bool:
        check_path(path, root=self._uri)
        if self.use_lock:
            return self._put_under_lock(path, data)
        self._probe_conditional_put()
        try:
            self._api_of().put(self._commit_store, path, data, mode="create")
            return True
        except (obx.AlreadyExistsError, obx.PreconditionError):
            return False
        except (NotImplementedError, obx.NotSupportedError):
            raise self._no_conditional_put("the client refuses conditional put for this store") from None
        except (obx.BaseError, OSError, RuntimeError) as exc:
            raise storage_error(exc, uri=self._uri, family=self.family, op="put_if_absent", path=path) from None

    def _put_under_lock(self, path: str, data: bytes) -> bool:
        """Put-if-absent through the commit records of the state store (:mod:`maintd.storage.lock`): the record
        inserted under the file's name decides, the file follows with the record's bytes."""
        if self.exists(path):  # published before the table opted in, or its record was pruned: never overwritten
            return False
        records, name = commit_lock(self._uri), f"{self._uri}/{path}"
        try:
            claim = records.claim(name, data)
        except StateStoreError as exc:  # the insert may have applied and lost its answer: the log reads back
            raise StorageError(f"table {self._uri}: publishing {path} failed: {exc}") from None
        if not claim.created and claim.pending is None:
            return False
        self.write_atomic(path, data if claim.created else claim.pending or b"")
        try:
            records.complete(name)
        except StateStoreError as exc:  # the file holds the record's bytes: any later claimant writes the same
            logger.warning("table {}: {} is written, but its record could not be marked complete ({})", self._uri,
                           path, exc)
        return claim.created

    def _probe_conditional_put(self) -> None:
        """Once per process and bucket: a store that ignores ``If-None-Match`` would let commits overwrite each
        other, so create a probe object twice and insist that the second create is refused."""
        key = (self.family, self.bucket, *self.options.for_store().items())
        with _probe_lock:
            if key in _probed:
                return
        probe = f"_maintd_probe/{uuid.uuid4().hex}"
        try:
            self._api_of().put(self._commit_store, probe, b"probe", mode="create")
            try:
                self._api_of().put(self._commit_store, probe, b"again", mode="create")
                honoured = False
            except (obx.AlreadyExistsError, obx.PreconditionError):
                honoured = True
        except (NotImplementedError, obx.NotSupportedError):
            raise self._no_conditional_put("the client refuses conditional put for this store") from None
        except (obx.BaseError, OSError, RuntimeError) as exc:
            if "501" in str(exc) or "NotImplemented" in str(exc):
                raise self._no_conditional_put(f"the store answered {_first_line(exc)}") from None
            raise storage_error(exc, uri=self._uri, family=self.family, op="put_if_absent", path=probe) from None
        finally:
            with contextlib.suppress(obx.BaseError, OSError, RuntimeError):  # else left for orphan cleanup
                self._api_of().delete(self._store, probe)
        if not honoured:
            raise self._no_conditional_put("the store overwrote an object that a create-only put named")
        with _probe_lock:
            _probed.add(key)

    def _no_conditional_put(self, why: str) -> ConditionalPutUnsupportedError:
        return ConditionalPutUnsupportedError(
            f"table {self._uri}: the store does not honour conditional put ({why}), so concurrent commits could "
            "overwrite each other; use a store that does (AWS S3, GCS, Azure, MinIO, recent Ceph), or opt into a "
            "commit lock held in the state store with the storage option commit_lock=state_store (every writer "
            "of the table must then use it)", uri=self._uri)

    # -- files --------------------------------------------------------------------------------------
    def write_atomic(self, path: str, data: bytes) -> None:
        check_path(path, root=self._uri)
        self._call("write", path, lambda: self._api_of().put(self._store, path, data))

    def read(self, path: str) -> bytes:
        check_path(path, root=self._uri)
        return self._call("read", path, lambda: bytes(self._api_of().get(self._store, path).bytes()))

    def exists(self, path: str) -> bool:
        check_path(path, root=self._uri)
        try:
            self._call("exists", path, lambda: self._api_of().head(self._store, path))
            return True
        except FileNotFoundError:
            return False

    @staticmethod
    def _info(meta: Mapping[str, Any]) -> FileInfo:
        return FileInfo(str(meta["path"]), int(meta["size"]), int(meta["last_modified"].timestamp() * 1000))

    def _checked_order(self, infos: list[FileInfo]) -> list[FileInfo]:
        """``infos`` as listed; if they are not in lexical order, the store is taken as unordered from now on
        (by every storage of this bucket in the process), whatever was assumed of it."""
        if self.lists_in_order and any(a.path > b.path for a, b in itertools.pairwise(infos)):
            self.lists_in_order = False
            with _probe_lock:
                first = (self.family, self.bucket) not in _unordered
                _unordered.add((self.family, self.bucket))
            if first:
                logger.warning("table {}: the store listed names out of lexical order{}; its listings are taken as "
                               "unordered from now on (set the storage option listing_order=unordered to say so)",
                               self._uri, " although listing_order=lexical was set" if self._order_promised else "")
        return infos

    def list_dir(self, path: str) -> list[FileInfo]:
        check_path(path, root=self._uri, allow_root=True)
        res = self._call("list", path, lambda: self._api_of().list_with_delimiter(self._store, path or None))
        return self._checked_order([self._info(m) for m in res["objects"]])

    def list_subdirs(self, path: str) -> list[str]:
        """The names of the "directories" (common prefixes) directly below ``path``."""
        check_path(path, root=self._uri, allow_root=True)
        res = self._call("list", path, lambda: self._api_of().list_with_delimiter(self._store, path or None))
        return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in res["common_prefixes"])

    def list_first(self, path: str, limit: int) -> list[FileInfo]:
        """One LIST request from the start of ``path`` for its first ``limit`` names.

        On S3 the request asks for exactly ``limit`` keys (:mod:`maintd.storage.s3list`), so its cost does
        not depend on how many names follow; elsewhere it is the store's first page.
        """
        check_path(path, root=self._uri)
        if not self.lists_in_order:  # the first names of an unordered listing are any names: sort them all
            return super().list_first(path, limit)
        base = f"{path.rstrip('/')}/"
        if self.family == "s3":
            root = f"{self.prefix}/" if self.prefix else ""
            keys = s3list.first_keys(self._uri, self.bucket, root + base, limit, self.options.for_store(),
                                     _WHAT_TO_SET["s3"])
            return self._checked_order([FileInfo(k[len(root):], size, mtime) for k, size, mtime in keys
                                        if "/" not in k[len(root) + len(base):]])

        def first() -> list[FileInfo]:
            out: list[FileInfo] = []
            for chunk in self._api_of().list(self._store, base, chunk_size=max(1, limit)):
                out += [self._info(m) for m in chunk if "/" not in str(m["path"])[len(base):]]
                if len(out) >= limit:
                    break
            return out[:limit]

        return self._checked_order(self._call("list", path, first))

    def walk(self, path: str = "") -> list[FileInfo]:
        check_path(path, root=self._uri, allow_root=True)
        prefix = f"{path.rstrip('/')}/" if path else None

        def collect() -> list[FileInfo]:
            return [self._info(m) for chunk in self._api_of().list(self._store, prefix, chunk_size=1000) for m in chunk]

        return self._checked_order(self._call("list", path, collect))

    def delete(self, path: str) -> bool:
        check_path(path, root=self._uri)
        if not self.exists(path):  # S3 answers a DELETE of a missing key with success: ask first
            return False
        self._call("delete", path, lambda: self._api_of().delete(self._store, path))
        return True

    def delete_many(self, paths: Sequence[str]) -> dict[str, Exception]:
        """Up to :data:`BULK_DELETE_KEYS` paths per request (S3 ``DeleteObjects``; obstore sends what each store
        offers), without asking first whether each is there. A request that fails is retried path by path, so
        the error of each path that could not be deleted is known."""
        for path in paths:
            check_path(path, root=self._uri)
        failed: dict[str, Exception] = {}
        for start in range(0, len(paths), BULK_DELETE_KEYS):
            chunk = list(paths[start:start + BULK_DELETE_KEYS])
            try:
                self._api_of().delete(self._store, chunk if len(chunk) > 1 else chunk[0])  # one key: a plain DELETE
                continue
            except (obx.BaseError, OSError, RuntimeError, ValueError) as exc:
                logger.debug("table {}: a bulk delete of {} paths failed ({}); deleting them one by one", self._uri,
                             len(chunk), _first_line(exc))
            for path in chunk:
                try:
                    self.delete(path)
                except (OSError, MaintdError) as exc:
                    failed[path] = exc
        return failed

    def update_atomic(self, path: str, change: Callable[[bytes | None], bytes | None]) -> bytes | None:
        """Read ``path`` with its version (ETag, GCS generation), then write ``change(current)`` only if the object
        is still that version (or, if it was absent, still absent); a write that loses to another one reads
        the new value and tries again. A store that refuses conditional writes falls back to a plain replace
        (stores without conditional put, committing through ``commit_lock``)."""
        check_path(path, root=self._uri)
        for attempt in range(UPDATE_ATTEMPTS):
            try:
                got = self._call("read", path, lambda: self._api_of().get(self._store, path))
                current: bytes | None = bytes(got.bytes())
                meta: Mapping[str, Any] | None = got.meta
            except FileNotFoundError:
                current, meta = None, None
            new = change(current)
            if new is None:
                return current
            if self.use_lock:
                self.write_atomic(path, new)
                return new
            mode: Any = "create"
            if meta is not None:
                mode = {k: str(meta[k]) for k in ("e_tag", "version") if meta.get(k) is not None}
            try:
                self._api_of().put(self._store, path, new, mode=mode)
                return new
            except (obx.AlreadyExistsError, obx.PreconditionError):
                pass  # another update came first: read it and change that
            except (NotImplementedError, obx.NotSupportedError):
                raise self._no_conditional_put("the client refuses conditional updates for this store") from None
            except (obx.BaseError, OSError, RuntimeError) as exc:
                if "409" not in str(exc):  # 409 ConditionalRequestConflict: a concurrent conditional write
                    raise storage_error(exc, uri=self._uri, family=self.family, op="update", path=path) from None
            time.sleep(random.uniform(0, min(0.5, 0.005 * 2 ** attempt)))
        raise StorageError(f"table {self._uri}: updating {path} lost to concurrent updates {UPDATE_ATTEMPTS} times "
                           "in a row; try again")

    def makedirs(self, path: str) -> None:
        check_path(path, root=self._uri, allow_root=True)  # object stores have no directories


def object_store_factory(uri: str) -> Storage:
    return ObjectStoreStorage(uri)


__all__ = ["ObjectStoreStorage", "object_store_factory", "split_uri", "storage_error"]
