"""``maintd store upgrade``: create the daemon's state store, or upgrade its schema, on demand.

The daemon upgrades the store itself when it starts (``store.migrate_on_start``); this command is for
stores whose schema changes are rolled out on their own (``migrate_on_start: false``), e.g. by a job
that runs before the new daemons, with a database user allowed to alter tables.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from maintd.cli._output import user_errors

if TYPE_CHECKING:
    pass

store_app = typer.Typer(help="The daemon's state store (SQLite or PostgreSQL): its schema.",
                        no_args_is_help=True, rich_markup_mode=None)


def register(app: typer.Typer) -> None:
    """Add the ``maintd store`` command group to the root app."""
    app.add_typer(store_app, name="store")


@store_app.command("upgrade")
def upgrade_command(
    config: Path | None = typer.Option(
        None, "--config", help="Settings YAML (default: $MAINTD_CONFIG, then config/maintd.yaml); its store is used."
    ),
) -> None:
    """Create the state store's tables, or upgrade them to this maintd's schema revision (Alembic)."""
    from rich.console import Console

    from maintd.service.store import StateStore
    from maintd.settings import load_settings, redact_url

    with user_errors():
        settings = load_settings(config)
        s = settings.store
        store = StateStore(s.url, db_schema=s.db_schema, connect_timeout=s.connect_timeout_seconds, create=False)
        try:
            before = store.schema_revision()
            found, now = store.upgrade_schema()
        finally:
            store.close()
    where = redact_url(s.url)
    if before == now:
        message = f"state store {where} is already at revision {now}"
    elif found is None and before is None:
        message = f"state store {where}: created or upgraded from maintd 0.1.0's schema to revision {now}"
    else:
        message = f"state store {where}: upgraded from revision {found} to revision {now}"
    Console(soft_wrap=True, highlight=False).print(message)
