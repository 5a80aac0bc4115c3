"""The bytes of one commit file: encoding, and decoding with the self-check (docs/format.md, "Commit files").

Format 2 (protocol 2 tables; 3 to 6 in tables of those protocols, 7 in tables on named features, the same but
for the number) starts with a header line that makes every commit file self-verifying::

    {"header":{"format":2,"version":7,"actions":4,"sha256":"<hex of every byte after this line>"}}
    {"commit_info":{...}}
    ...

A file cut anywhere (at a line boundary too, or to nothing), a flipped byte, a line added or lost, or a
commit file copied under another version's name fails the check with :class:`~maintd.errors.CorruptLogError`
naming the file and the version, instead of silently losing rows. Format 1 (tables of protocol 1) has no
header: its lines are parsed as they are, and only what does not parse is detected.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from maintd.errors import CorruptLogError, UnsupportedProtocolError
from maintd.table.log import features
from maintd.table.log.actions import Action, CommitInfo, Protocol, action_from_dict, action_to_json

FORMAT = 7
"""The newest commit file format this code reads and writes: a legacy table's is its protocol version (2 to 6:
3, tables that may hold pins; 4, also prior-row files; 5, also looked-up ones; 6, also columns added to the schema),
a table on named features' is 7 (:func:`maintd.table.log.features.commit_format`). Older readers refuse a file by
its number before they meet an action they do not know."""
HEADER_KEY = "header"
RECOVER = "Restore the file from a backup, or see docs/operations.md 'Recover'"


def format_for(protocol: Protocol) -> int:
    """The commit file format of a table of ``protocol`` (:func:`maintd.table.log.features.commit_format`)."""
    return features.commit_format(protocol)


def encode_commit(actions: Sequence[Action], *, version: int, fmt: int = 2) -> bytes:
    """The commit file of ``actions`` at ``version`` (format 1: the action lines only)."""
    body = "".join(action_to_json(a) + "\n" for a in actions).encode()
    if fmt < 2:
        return body
    header = {HEADER_KEY: {"format": fmt, "version": version, "actions": len(actions),
                           "sha256": hashlib.sha256(body).hexdigest()}}
    return json.dumps(header, separators=(",", ":")).encode() + b"\n" + body


class Where:
    """Names a log file (``commit file`` or ``checkpoint``) in error messages."""

    def __init__(self, uri: str, path: str, version: int | None, kind: str = "commit file") -> None:
        self.uri, self.path, self.version, self.kind = uri, path, version, kind

    def corrupt(self, problem: str) -> CorruptLogError:
        at = f" (version {self.version})" if self.version is not None else ""
        return CorruptLogError(
            f"table {self.uri}: {self.kind} {self.path}{at} {problem}; the table cannot be read past it. {RECOVER}",
            path=self.path, version=self.version,
        )


def decode_commit(data: bytes, *, uri: str, path: str, version: int | None) -> list[Action]:
    """The actions of a commit file, after its self-check.

    Raises:
        CorruptLogError: the file is empty, fails its checksum or action count, names another version, or
            holds a line that is not a valid action (naming the file, the version and the line).
        UnsupportedProtocolError: the file is in a format newer than this code reads.
    """
    where, body, first_lineno = _checked_body(data, uri, path, version)
    return decode_lines(body, where, first_lineno)


def decode_commit_txn_id(data: bytes, *, uri: str, path: str, version: int | None) -> str:
    """The transaction id of a commit file, after the same self-check, parsing only its first action when that
    is the ``commit_info`` (as maintd writes it): what a committer reads to check the commit it built on."""
    where, body, first_lineno = _checked_body(data, uri, path, version)
    first = body.lstrip().partition(b"\n")[0]
    if first.startswith(b'{"commit_info":'):
        return commit_txn_id(decode_lines(first, where, first_lineno))
    return commit_txn_id(decode_lines(body, where, first_lineno))


def _checked_body(data: bytes, uri: str, path: str, version: int | None) -> tuple[Where, bytes, int]:
    """The action lines of a commit file once its header (if any) checked out, and the number of the first."""
    where = Where(uri, path, version)
    if not data.strip():
        raise where.corrupt("is empty (truncated)")
    first, _, rest = data.partition(b"\n")
    header = _header(first)
    if header is None:
        return where, data, 1
    _check(header, rest, where)
    return where, rest, 2


def _header(line: bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if isinstance(obj, dict) and len(obj) == 1 and HEADER_KEY in obj:
        return obj[HEADER_KEY] if isinstance(obj[HEADER_KEY], dict) else {}
    return None


def _check(header: dict[str, Any], body: bytes, where: Where) -> None:
    fmt, version, count, digest = (header.get(k) for k in ("format", "version", "actions", "sha256"))
    if not (isinstance(fmt, int) and isinstance(version, int) and isinstance(count, int) and isinstance(digest, str)):
        raise where.corrupt(f"has a malformed header {header}")
    if fmt > FORMAT:
        raise UnsupportedProtocolError(
            f"table {where.uri}: commit file {where.path} is in format {fmt}; this maintd reads up to format "
            f"{FORMAT}: upgrade maintd to read this table", required=fmt, supported=FORMAT)
    if where.version is not None and version != where.version:
        raise where.corrupt(f"holds version {version}, not the version its name gives (copied or renamed?)")
    if hashlib.sha256(body).hexdigest() != digest:
        lines = sum(1 for line in body.splitlines() if line.strip())
        raise where.corrupt(f"fails its checksum: {lines} of {count} action line(s) and {len(body)} bytes are "
                            "there (truncated or damaged)")
    lines = sum(1 for line in body.splitlines() if line.strip())
    if lines != count:
        raise where.corrupt(f"holds {lines} action line(s) but its header says {count}")


def decode_lines(data: bytes, where: Where, first_lineno: int = 1) -> list[Action]:
    """Parse action lines; the first line that is no valid action is :class:`CorruptLogError`."""
    out: list[Action] = []
    for lineno, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), first_lineno):
        if not line.strip():
            continue
        try:
            out.append(action_from_dict(json.loads(line)))
        except (ValueError, TypeError) as exc:
            raise where.corrupt(f"line {lineno} is not a valid log action ({_one_line(exc)})") from None
    if not out:
        raise where.corrupt("holds no action")
    return out


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def commit_txn_id(actions: Sequence[Action]) -> str:
    """The transaction id a commit carries ("" if it has no ``commit_info``)."""
    return next((a.txn_id for a in actions if isinstance(a, CommitInfo)), "")


__all__ = ["FORMAT", "HEADER_KEY", "RECOVER", "Where", "commit_txn_id", "decode_commit", "decode_commit_txn_id",
           "decode_lines", "encode_commit", "format_for"]
