"""Keeping passwords out of everything maintd writes: logs, error messages, ``/readyz``, stored errors.

A module of its own (re-exported by :mod:`maintd.settings`) so that the command line can redact its
output without importing the settings machinery.
"""

from __future__ import annotations

import re

# scheme://user:password@host -> scheme://user:***@host; the password may hold any character but '@'
# and whitespace, so that passwords with ':' or '/' are redacted in full.
_URL_PASSWORD = re.compile(r"(?P<prefix>[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@]*:)(?P<password>[^\s@]+)(?P<at>@)")
# password=... in libpq keyword strings and query strings.
_KEYWORD_PASSWORD = re.compile(r"(?P<prefix>\bpassword=)(?P<password>[^\s&;'\"]+)", re.IGNORECASE)
REDACTED = "***"


def redact_url(url: str) -> str:
    """Return ``url`` with its password (if any) replaced by ``***``.

    Example: ``postgresql+psycopg://maintd:s3cret@db:5432/maintd`` becomes
    ``postgresql+psycopg://maintd:***@db:5432/maintd``.
    """
    return redact_secrets(url)


def redact_secrets(text: str) -> str:
    """Replace every password found in URLs or ``password=`` pairs of ``text`` by ``***``."""
    text = _URL_PASSWORD.sub(lambda m: f"{m['prefix']}{REDACTED}{m['at']}", text)
    return _KEYWORD_PASSWORD.sub(lambda m: f"{m['prefix']}{REDACTED}", text)


__all__ = ["REDACTED", "redact_secrets", "redact_url"]
