"""Storage options of object-store tables: what the user configured per URI prefix, merged with the environment.

Options are ``object_store`` configuration keys (``aws_endpoint``, ``aws_access_key_id``,
``aws_secret_access_key``, ``aws_session_token``, ``aws_region``, ``aws_allow_http``,
``google_service_account``, ``azure_storage_account_name``...), the keys delta-rs and obstore use, so a
configuration written for one works for the others. :func:`configure_storage` registers them for every
table URI below a prefix (the longest registered prefix wins); explicit options take precedence over the
standard environment variables (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ``AWS_ALLOW_HTTP=true``...),
which are used otherwise. Without either, the store's default credential chain applies (instance
profiles, IRSA web identity tokens, ``GOOGLE_APPLICATION_CREDENTIALS``...).

Spark executors on another machine see neither the driver's registrations nor its environment: a task
carries the resolved options of its table (:func:`carry_storage`), a :class:`StorageOptions` whose
``repr`` and ``str`` show every secret as ``***``, so that a logged task or error never reveals one. By
default it carries only the options that are not credentials (endpoint, region, ``aws_allow_http``...):
executors use their own credentials (environment, instance role, IRSA, workload identity), which a
driver's would otherwise override. Shipping the credentials too is an explicit choice
(:data:`SHIP_CONF`, ``spark.ship_storage_options``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from maintd.errors import InvalidInputError
from maintd.storage.base import Storage, storage_for_uri

REDACTED = "***"
_SECRET_WORDS = ("secret", "token", "password", "key", "sas", "credential", "service_account")
_NOT_SECRET = ("aws_access_key_id", "access_key_id", "azure_storage_account_name", "account_name",
               "google_service_account_path", "aws_sse_kms_key_id", "azure_client_id", "client_id")

SHIP_CONF = "spark.maintd.storage.shipOptions"
"""Spark conf: ``true`` ships the driver's storage credentials to the executors inside every task."""
_IDENTITY = ("aws_access_key_id", "access_key_id", "google_service_account", "google_service_account_path",
             "google_application_credentials", "azure_client_id", "azure_tenant_id", "azure_federated_token_file",
             "aws_web_identity_token_file", "aws_role_arn", "aws_profile", "aws_container_credentials_relative_uri")
"""Options that name whose credentials to use (or a file of the driver's that holds them): left out with the
secrets when credentials are not shipped, so that an executor's own identity applies as a whole."""

MAINTD_KEYS = ("commit_lock", "listing_order")
"""Options read by maintd itself, never passed to the store: ``commit_lock`` (``state_store``) opts a store
without conditional put into commits recorded in the state store; ``listing_order`` (``auto``, ``lexical`` or
``unordered``) says whether the store lists names in lexical order."""

# The environment variables of each family, as object_store reads them, by configuration key. Only these
# are merged in (object_store's own ``from_env`` would also pick up unrelated AWS_* variables).
_ENV: dict[str, tuple[tuple[str, str], ...]] = {
    "s3": (("aws_access_key_id", "AWS_ACCESS_KEY_ID"), ("aws_secret_access_key", "AWS_SECRET_ACCESS_KEY"),
           ("aws_session_token", "AWS_SESSION_TOKEN"), ("aws_region", "AWS_REGION"),
           ("aws_region", "AWS_DEFAULT_REGION"), ("aws_endpoint", "AWS_ENDPOINT_URL_S3"),
           ("aws_endpoint", "AWS_ENDPOINT_URL"), ("aws_allow_http", "AWS_ALLOW_HTTP")),
    "gcs": (("google_service_account", "GOOGLE_SERVICE_ACCOUNT"),
            ("google_service_account", "GOOGLE_APPLICATION_CREDENTIALS"),
            ("google_service_account_key", "GOOGLE_SERVICE_ACCOUNT_KEY"), ("google_bucket", "GOOGLE_BUCKET")),
    "azure": (("azure_storage_account_name", "AZURE_STORAGE_ACCOUNT_NAME"),
              ("azure_storage_account_key", "AZURE_STORAGE_ACCOUNT_KEY"),
              ("azure_storage_sas_key", "AZURE_STORAGE_SAS_KEY"), ("azure_client_id", "AZURE_CLIENT_ID"),
              ("azure_client_secret", "AZURE_CLIENT_SECRET"), ("azure_tenant_id", "AZURE_TENANT_ID"),
              ("azure_storage_use_emulator", "AZURE_STORAGE_USE_EMULATOR"),
              ("azure_endpoint", "AZURE_STORAGE_ENDPOINT"), ("azure_allow_http", "AZURE_ALLOW_HTTP")),
}
FAMILIES = {"s3": "s3", "s3a": "s3", "gs": "gcs", "az": "azure", "abfs": "azure", "abfss": "azure"}
"""URI scheme -> family of object store."""


def is_secret(key: str) -> bool:
    """Whether the value of option ``key`` is a secret (never shown: keys, tokens, passwords, SAS...)."""
    k = key.lower()
    return k not in _NOT_SECRET and any(w in k for w in _SECRET_WORDS)


@dataclass(frozen=True)
class StorageOptions(Mapping[str, str]):
    """Immutable options whose ``repr`` hides secret values (safe to log, pickle to executors, put in errors)."""

    items_: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, options: Mapping[str, object] | None) -> StorageOptions:
        if isinstance(options, StorageOptions):
            return options
        out: dict[str, str] = {}
        for k, v in (options or {}).items():
            if not isinstance(k, str) or not k:
                raise InvalidInputError(f"storage option names must be non-empty strings, got {k!r}")
            out[k.lower()] = ("true" if v else "false") if isinstance(v, bool) else str(v)
        return cls(tuple(sorted(out.items())))

    def __getitem__(self, key: str) -> str:
        for k, v in self.items_:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self.items_)

    def __len__(self) -> int:
        return len(self.items_)

    def redacted(self) -> dict[str, str]:
        return {k: REDACTED if is_secret(k) else v for k, v in self.items_}

    def __repr__(self) -> str:
        return f"StorageOptions({self.redacted()!r})"

    __str__ = __repr__

    def for_store(self) -> dict[str, str]:
        """The options handed to the object store (maintd's own keys left out)."""
        return {k: v for k, v in self.items_ if k not in MAINTD_KEYS}


_lock = threading.Lock()
_configured: dict[str, StorageOptions] = {}


def _norm_prefix(prefix: str) -> str:
    return "s3://" + prefix[len("s3a://"):] if prefix.startswith("s3a://") else prefix


def configure_storage(prefix: str, options: Mapping[str, object]) -> None:
    """Use ``options`` for every table URI that starts with ``prefix`` (the longest registered prefix wins).

    ``s3a://`` and ``s3://`` prefixes are the same. Registering a prefix again replaces its options.
    """
    if not isinstance(prefix, str) or "://" not in prefix:
        raise InvalidInputError(f"storage options need a URI prefix such as s3://bucket/warehouse, got {prefix!r}")
    opts = StorageOptions.of(options)
    with _lock:
        _configured[_norm_prefix(prefix)] = opts


def clear_storage_options() -> None:
    """Forget every registered prefix (tests)."""
    with _lock:
        _configured.clear()


def configured_options(uri: str) -> StorageOptions:
    """The options registered for the longest prefix of ``uri`` (empty if none)."""
    uri = _norm_prefix(uri)
    with _lock:
        best = max((p for p in _configured if uri.startswith(p)), key=len, default=None)
        return _configured[best] if best is not None else StorageOptions()


def env_options(family: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The options of ``family`` (``s3``, ``gcs``, ``azure``) set in the environment."""
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for key, var in _ENV.get(family, ()):
        value = env.get(var)
        if value and key not in out:
            out[key] = value
    return out


def resolve_options(uri: str, environ: Mapping[str, str] | None = None) -> StorageOptions:
    """The options a table at ``uri`` is opened with: the environment's, overridden by the registered ones.

    Credentials are taken as a whole from one source: when the registered options name an access key (or an
    account key, a service account), no key, secret or token of the environment is mixed in.
    """
    family = FAMILIES.get(uri.split("://", 1)[0], "")
    explicit = dict(configured_options(uri))
    env = env_options(family, environ)
    if any(k in explicit for k in ("aws_access_key_id", "access_key_id", "azure_storage_account_key",
                                   "google_service_account", "google_service_account_key")):
        env = {k: v for k, v in env.items() if not is_secret(k) and k != "aws_access_key_id"}
    return StorageOptions.of({**env, **explicit})


@dataclass(frozen=True)
class CarriedStorage:
    """What a Spark task needs to open the storage of a table on an executor: the URI and its resolved options.

    Pickled with the task; its ``repr`` hides secrets. :meth:`install` registers the options on the
    executor, exactly for this URI, so :func:`~maintd.storage.storage_for_uri` builds the same storage there.
    """

    uri: str
    options: StorageOptions

    def install(self) -> None:
        if self.options:
            configure_storage(self.uri, self.options)


def executor_storage(uri: str, carried: CarriedStorage | None) -> Storage:
    """The storage of ``uri`` in a Spark task: the carried options registered first (a no-op on the driver)."""
    if carried is not None:
        carried.install()
    return storage_for_uri(uri)


def is_credential(key: str) -> bool:
    """Whether option ``key`` is part of a credential: a secret, or names an identity or a credentials file."""
    return is_secret(key) or key.lower() in _IDENTITY


def carry_storage(uri: str, credentials: bool = False) -> CarriedStorage | None:
    """The storage of ``uri`` as a task carries it (None for local tables: nothing to carry).

    Without ``credentials`` the options that are credentials (:func:`is_credential`) stay on the driver: the
    executor's own environment or role supplies them. With it, the driver's resolved credentials travel (hidden
    in every ``repr``; the caller asked for it explicitly).
    """
    if "://" not in uri or uri.startswith("file:"):
        return None
    options = resolve_options(uri)
    if not credentials:
        options = StorageOptions.of({k: v for k, v in options.items() if not is_credential(k)})
    return CarriedStorage(uri, options)


__all__ = ["FAMILIES", "MAINTD_KEYS", "REDACTED", "SHIP_CONF", "CarriedStorage", "StorageOptions", "carry_storage",
           "clear_storage_options", "configure_storage", "configured_options", "env_options", "executor_storage",
           "is_credential", "is_secret", "resolve_options"]
