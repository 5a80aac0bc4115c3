"""Shared output helpers of the CLI: one place decides how errors, JSON, tables and sizes are printed.

Errors are one line on stderr, passwords redacted. Tables are Rich tables on a terminal; without one
(a pipe, a file, ``kubectl logs``) they are printed plain: no colour, no box, as wide as their content,
never cut or wrapped at 80 columns. ``--json`` stays the format for programs.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import typer

from maintd.errors import MaintdError
from maintd.redaction import redact_secrets

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

T = TypeVar("T")


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``error: message`` on stderr (one line, passwords redacted, the message taken literally) and exit
    with ``code``."""
    from rich.console import Console  # imported when needed: Rich costs a command's start-up a third of a second

    err_console = Console(stderr=True, soft_wrap=True)
    err_console.print("[red]error:[/red] ", end="", markup=True, highlight=False)
    err_console.print(redact_secrets(message), markup=False, highlight=False)
    raise typer.Exit(code)


BAD_INPUT = 2
"""Exit code of a command given bad input: an argument, option, file or setting that is wrong, or a table
that does not exist. Running it again unchanged fails again (README, "Exit codes")."""
FAILED_WORK = 1
"""Exit code of a command whose work failed: a table it could not maintain, reclaim or read (storage down,
a damaged table, a task that failed). Running it again may succeed."""


def exit_code_for(exc: BaseException) -> int:
    """:data:`BAD_INPUT` for an error the caller must fix (bad input, a missing table or one already there, a
    version not retained, a table that needs a newer maintd, a bad policy or setting, a missing confirmation).
    :data:`FAILED_WORK` for any other (storage or state store failing, a damaged table, a failed task or commit).
    """
    from maintd.errors import (
        ConfigError,
        ConfirmationRequiredError,
        InvalidInputError,
        PolicyError,
        StateStoreSchemaError,
        TableExistsError,
        TableNotFoundError,
        UnsupportedProtocolError,
        VersionNotFoundError,
    )

    user = (InvalidInputError, TableNotFoundError, TableExistsError, VersionNotFoundError, PolicyError, ConfigError,
            ConfirmationRequiredError, UnsupportedProtocolError, StateStoreSchemaError)
    return BAD_INPUT if isinstance(exc, user) else FAILED_WORK


#: The width plain tables are laid out in before they are printed as wide as they need.
_UNBOUNDED = 100_000


def print_table(console: Console, table: Table) -> None:
    """Print ``table``: as is on a terminal; plain and full width otherwise (see the module docstring)."""
    if console.is_terminal:
        console.print(table)
        return
    from rich.console import Console

    table.box = None
    table.show_edge = False
    width = console.measure(table, options=console.options.update_width(_UNBOUNDED)).maximum
    plain = Console(file=console.file, width=max(1, width), color_system=None, highlight=False, soft_wrap=False)
    plain.print(table)


def load_cli_settings(config: Any) -> Any:
    """The settings of a command (``--config`` or the default sources), with the warehouse's object-store
    options registered (:func:`maintd.settings.apply_storage_settings`); invalid settings end the command
    with one line and exit code 2."""
    from maintd.settings import apply_storage_settings, load_settings

    with user_errors():
        settings = load_settings(config)
        apply_storage_settings(settings)
    return settings


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn library errors into one clear line on stderr, and exit code 2 for bad input or a missing table, 1 for
    work that failed (:func:`exit_code_for`)."""
    try:
        yield
    except MaintdError as exc:
        fail(str(exc), code=exit_code_for(exc))


def stdin_is_terminal() -> bool:
    """Whether a person can answer a prompt (standard input is a terminal)."""
    return sys.stdin.isatty()


def confirm(question: str, *, yes: bool, refusal: str, cancelled: str, out: Console) -> None:
    """Go on only if ``yes``, or a person at a terminal answers ``question`` yes.

    Off a terminal without ``yes``: :class:`~maintd.errors.ConfirmationRequiredError` (``refusal`` says what to
    pass), one line and exit code 2. A person who answers no: ``cancelled`` printed, exit code 1.
    """
    from maintd.errors import ConfirmationRequiredError

    if yes:
        return
    if not stdin_is_terminal():
        with user_errors():
            raise ConfirmationRequiredError(refusal)
    if not typer.confirm(question, default=False, err=True):
        out.print(cancelled)
        raise typer.Exit(1)


def guarded(fn: Callable[[], T]) -> T:
    with user_errors():
        return fn()


def print_json(obj: Any) -> None:
    """Write ``obj`` as indented JSON on stdout (datetimes as ISO-8601)."""
    sys.stdout.write(json.dumps(obj, indent=2, default=_default, sort_keys=False) + "\n")


def _default(o: Any) -> Any:
    if isinstance(o, datetime):
        return o.isoformat()
    if hasattr(o, "model_dump"):
        return o.model_dump(mode="json")
    if isinstance(o, set | frozenset | tuple):
        return list(o)
    return str(o)


def iso_ms(ms: int) -> str:
    """An epoch-milliseconds time as ISO-8601 UTC."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


_EXAMPLES = {"--property": "acid.data.retain.hours=24", "--partition": "ds=2026-01-01"}


def parse_kv(items: list[str] | None, what: str) -> dict[str, str]:
    """``["k=v", ...]`` to a dict; a malformed item is a clear error naming it."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            fail(f"{what} {item!r} is not KEY=VALUE; write it as e.g. {what} {_EXAMPLES.get(what, 'key=value')}")
        out[key.strip()] = value.strip()
    return out
