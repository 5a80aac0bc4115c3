"""The ``maintd`` command line (typer).

Every command lives in its own module with a ``register(app)`` function; the root app imports them in
:data:`COMMAND_MODULES` order. Errors from the library (:class:`maintd.errors.MaintdError`, every subclass,
present and future) are printed as one clear line naming what is wrong, passwords redacted, with exit code
2 for bad input or a missing table and 1 for work that failed (README, "Exit codes"). Operating-system errors
about a path are one line and exit code 2 too (``OSError``: not a directory, no permission); other
unexpected errors keep their traceback. Logging is configured before any command runs (WARNING, no
variable values in tracebacks, secrets redacted; see :mod:`maintd.service.logging`); the daemon and
``maintd run`` then apply the ``logging`` settings.
"""

from __future__ import annotations

import gc
import sys
from importlib import import_module
from typing import Any

import typer

from maintd import __version__

COMMAND_MODULES: tuple[str, ...] = (
    "table", "read", "plan", "run", "reclaim", "demo", "daemon", "status", "store", "simulate", "tune",
)

#: Commands that read, print and exit: :func:`main` runs them without the cyclic garbage collector.
SHORT_COMMANDS = frozenset({"status", "history", "plan", "table"})
_gc_paused = False
"""Whether :func:`main` turned the collector off (so the root callback turns it back on for other commands)."""

app = typer.Typer(
    name="maintd",
    help="Table maintenance for primary-key delta tables: clustering, compaction and reclamation on Spark.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: Rich's help renderer alone would triple the start-up time of every command
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"maintd {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """maintd keeps primary-key delta tables healthy: it merges small files, compacts and reclaims history."""
    global _gc_paused
    if _gc_paused and ctx.invoked_subcommand not in SHORT_COMMANDS:
        gc.enable()  # the daemon, maintd run and the others may run for long: they collect as usual
        _gc_paused = False
    from maintd.service.logging import configure_logging

    configure_logging(level="WARNING")
    if ctx.invoked_subcommand and not _takes_config(ctx, ctx.invoked_subcommand):
        # Commands on table URIs (table, read, plan, demo) open object stores with the warehouse's storage
        # options of the default settings ($MAINTD_CONFIG, config/maintd.yaml, MAINTD_*); the others load
        # the settings of their --config themselves (maintd.cli._output.load_cli_settings).
        from maintd.cli._output import load_cli_settings

        load_cli_settings(None)


def _takes_config(ctx: typer.Context, name: str) -> bool:
    """Whether command ``name`` (or any command of group ``name``) has its own ``--config`` option.

    Walks the command tree by its attributes (``get_command``, ``commands``, ``params``), not by class:
    typer builds it from click or from its own copy of click, depending on its release.
    """
    get_command = getattr(ctx.command, "get_command", None)
    command = get_command(ctx, name) if get_command is not None else None
    stack: list[Any] = [command] if command is not None else []
    while stack:
        cmd = stack.pop()
        if any(p.name == "config" for p in cmd.params):
            return True
        stack.extend(getattr(cmd, "commands", {}).values())
    return False


for _name in COMMAND_MODULES:
    import_module(f"{__name__}.{_name}").register(app)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``maintd`` script.

    Starting a command allocates a few hundred thousand objects that live as long as the process (classes,
    pydantic and SQLAlchemy schemas), and the cyclic garbage collector walks them over and over as they pile
    up: a sixth of the start of ``maintd status``. So the collector is off until the root callback knows the
    command, and stays off for :data:`SHORT_COMMANDS`, which exit soon (reference counting still frees every
    object that is not in a cycle).
    """
    global _gc_paused
    from maintd.errors import MaintdError
    from maintd.redaction import redact_secrets

    if gc.isenabled():
        gc.disable()
        _gc_paused = True
    try:
        app(args=argv, prog_name="maintd")
    except MaintdError as exc:  # commands map their own errors; this is the safety net for every other one
        from maintd.cli._output import exit_code_for

        sys.stderr.write(f"error: {redact_secrets(str(exc))}\n")
        raise SystemExit(exit_code_for(exc)) from None
    except OSError as exc:  # a path that is wrong (not a directory, no permission...): name it
        where = f": {exc.filename}" if exc.filename else ""
        sys.stderr.write(f"error: {redact_secrets(exc.strerror or str(exc))}{where}\n")
        raise SystemExit(2) from None
    finally:
        if _gc_paused:
            gc.enable()
            _gc_paused = False
