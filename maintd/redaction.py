"""Keeping secrets out of everything maintd writes: the one place every outlet redacts through.

Every error maintd raises (:class:`~maintd.errors.MaintdError` redacts its own message), every log line (the
loguru patcher and sink, the driver JVM's output forwarded through them), ``repr`` of settings and storage
options, the command line's output (errors, ``--json``), ``/readyz`` and the errors stored in the state store
go through :func:`redact_secrets`. The environment of every child process maintd starts (the driver JVM and its
Python workers, the fork server of plans run in process and its children) goes through :func:`child_environment`.

Three kinds of secret are removed from any text:

* passwords in URLs (``scheme://user:password@host``) and ``password=`` pairs.
* the values of credential-like keys written as ``key=value``, ``key: value`` or ``"key": "value"``
  (``aws_secret_access_key``, ``aws_session_token``, ``azure_storage_sas_key``, ``client_secret``,
  ``X-Amz-Security-Token``, ``X-Amz-Signature``, an Azure SAS ``sig=``...) and PEM private-key blocks
  (the body of a GCS service account key).
* every secret value maintd was configured with (:func:`register_secret`): the storage options of the
  settings and the credential variables of the environment (``AWS_SECRET_ACCESS_KEY``...), wherever and
  however they show up, because an error message of a storage library may quote one without its key.

A module of its own (re-exported by :mod:`maintd.settings`) so that the command line can redact its
output without importing the settings machinery.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

# scheme://user:password@host -> scheme://user:***@host; the password may hold any character but '@'
# and whitespace, so that passwords with ':' or '/' are redacted in full.
_URL_PASSWORD = re.compile(r"(?P<prefix>[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@]*:)(?P<password>[^\s@]+)(?P<at>@)")
# password=... in libpq keyword strings and query strings.
_KEYWORD_PASSWORD = re.compile(r"(?P<prefix>\bpassword=)(?P<password>[^\s&;'\"]+)", re.IGNORECASE)
# Credential-like keys of object stores, cloud SDKs and signed URLs, followed by = or : and a value
# (quoted or not). Key ids (aws_access_key_id, account names) are not secrets and are kept.
_SECRET_KEY = (
    r"(?:[A-Za-z0-9_\-]*(?:secret|token|password|passwd|sas_key|sas_token|account_key|service_account_key|"
    r"private_key|credentials?)[A-Za-z0-9_\-]*|x-amz-signature|x-amz-security-token|sig)"
)
_KEY_VALUE = re.compile(
    rf"(?P<prefix>(?P<q>['\"]?)\b{_SECRET_KEY}(?<!error)(?<!exception)(?<!warning)(?P=q)\s*(?:=|:)\s*)"
    r"(?!(?:set|give|use|pass|provide|configure)\s+\S)"  # prose ("credentials: set AWS_..."), not a value
    r"(?P<open>['\"])?"
    r"(?P<value>(?(open)[^'\"]*|[^\s&;,'\"})\]]+))",
    re.IGNORECASE,
)
_PEM = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)", re.DOTALL)
REDACTED = "***"

#: Environment variables whose values are credentials (registered by :func:`register_environment_secrets`).
SECRET_ENVIRONMENT = (
    "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_SAS_KEY", "AZURE_STORAGE_SAS_TOKEN", "AZURE_CLIENT_SECRET", "GOOGLE_SERVICE_ACCOUNT_KEY",
)
#: Values shorter than this are not replaced wherever they appear (they would mangle ordinary text);
#: the key=value rules above still hide them.
MIN_SECRET_LENGTH = 6

_lock = threading.Lock()
_secrets: tuple[str, ...] = ()
_KEY_LINE = re.compile(r"[A-Za-z0-9+/=]{16,}")
"""A line of a key's body (base64): registered on its own when a secret of several lines is."""


def register_secret(value: object) -> None:
    """Redact ``value`` wherever it appears in text from now on (values shorter than 6 characters are not).

    A secret of several lines (a service account's key file, its PEM key) is also registered line by line, as
    written and with its newlines escaped as in JSON, so that a message quoting a part of it hides that part."""
    global _secrets
    text = str(value or "").strip()
    if len(text) < MIN_SECRET_LENGTH:
        return
    parts = {text} | {line.strip() for line in re.split(r"\n|\\n|\r", text) if _KEY_LINE.fullmatch(line.strip())}
    with _lock:
        new = parts - set(_secrets)
        if new:  # longest first, so a secret that contains another is replaced whole
            _secrets = tuple(sorted((*_secrets, *new), key=len, reverse=True))


def register_secrets(values: Iterable[object]) -> None:
    for value in values:
        register_secret(value)


def register_environment_secrets(environ: Mapping[str, str] | None = None) -> None:
    """Register the values of the credential variables of the environment (:data:`SECRET_ENVIRONMENT`)."""
    env = os.environ if environ is None else environ
    register_secrets(env.get(name) for name in SECRET_ENVIRONMENT)


_URL_CREDENTIALS = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://(?P<user>[^:/@]*):(?P<password>.*)@[^@]*$", re.DOTALL)


def register_url_password(url: str | None) -> None:
    """Register the password of a database URL (``postgresql+psycopg://user:password@host/db``) as a secret, as
    written and percent-decoded: a password with spaces or ``@`` is found whole (up to the URL's last ``@``),
    which the URL pattern of :func:`redact_secrets` alone cannot do."""
    match = _URL_CREDENTIALS.match((url or "").strip())
    if match is None or not match["password"]:
        return
    from urllib.parse import unquote

    register_secrets((match["password"], unquote(match["password"])))


#: Variables a child process never needs and that carry the state store's credentials.
DATABASE_ENVIRONMENT = ("PGPASSWORD", "PGPASSFILE", "MAINTD_STORE__URL", "MAINTD_STORE_URL")


def child_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a process maintd starts (the driver JVM and its workers, the fork server of
    plans run in process and its children):
    ``environ`` (default: this process's) without the state store's credentials, nor any other ``MAINTD_*``
    variable that holds a registered secret. Children read tables, never the state store; the object-store
    credential variables they may read tables with (``AWS_SECRET_ACCESS_KEY``...) are kept."""
    env = dict(os.environ if environ is None else environ)
    with _lock:
        secrets = _secrets
    for name in list(env):
        value = env[name]
        if name in DATABASE_ENVIRONMENT or (name.startswith("MAINTD_") and any(s in value for s in secrets)):
            del env[name]
    return env


@contextmanager
def withheld_from_children() -> Iterator[None]:
    """``os.environ`` without what :func:`child_environment` leaves out, while a library that copies the whole
    environment starts a child (PySpark's launch of the driver JVM, whose Python workers inherit its environment);
    put back afterwards."""
    withheld = {k: os.environ[k] for k in os.environ.keys() - child_environment().keys()}
    for name in withheld:
        del os.environ[name]
    try:
        yield
    finally:
        os.environ.update(withheld)


def forget_secrets() -> None:
    """Forget every registered secret value (tests)."""
    global _secrets
    with _lock:
        _secrets = ()


#: Option names that look credential-like but are not secret (identifiers, names, paths).
_NOT_SECRET = frozenset({"aws_access_key_id", "access_key_id", "azure_storage_account_name", "account_name",
                         "azure_client_id", "client_id", "azure_tenant_id", "tenant_id", "google_service_account_path",
                         "aws_sse_kms_key_id", "google_application_credentials"})
_SECRET_OPTION = re.compile(r".*(secret|token|password|passwd|sas|account_key|service_account|private_key|credential"
                            r"|_key$|^key$).*", re.IGNORECASE)


def is_secret_option(name: str) -> bool:
    """Whether the value of storage option (or setting) ``name`` is a credential that must never be shown."""
    return name.lower() not in _NOT_SECRET and _SECRET_OPTION.fullmatch(name) is not None


def redact_options(options: Mapping[str, object]) -> dict[str, object]:
    """``options`` with the value of every credential-like key replaced by ``***``."""
    return {k: REDACTED if is_secret_option(k) and v else v for k, v in options.items()}


def redact_url(url: str) -> str:
    """Return ``url`` with its password (if any) replaced by ``***``.

    Example: ``postgresql+psycopg://maintd:s3cret@db:5432/maintd`` becomes
    ``postgresql+psycopg://maintd:***@db:5432/maintd``.
    """
    return redact_secrets(url)


def redact_secrets(text: str) -> str:
    """Replace every password, credential-like ``key=value`` and registered secret of ``text`` by ``***``."""
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    text = _PEM.sub(REDACTED, text)
    text = _URL_PASSWORD.sub(lambda m: f"{m['prefix']}{REDACTED}{m['at']}", text)
    text = _KEYWORD_PASSWORD.sub(lambda m: f"{m['prefix']}{REDACTED}", text)
    return _KEY_VALUE.sub(_hide_value, text)


def _hide_value(match: re.Match[str]) -> str:
    if not match["value"] or match["value"] == REDACTED:
        return match[0]
    return f"{match['prefix']}{match['open'] or ''}{REDACTED}"


__all__ = [
    "DATABASE_ENVIRONMENT",
    "REDACTED",
    "SECRET_ENVIRONMENT",
    "child_environment",
    "forget_secrets",
    "is_secret_option",
    "redact_options",
    "redact_secrets",
    "redact_url",
    "register_environment_secrets",
    "register_secret",
    "register_secrets",
    "register_url_password",
    "withheld_from_children",
]
