"""Schema migrations of the state store (Alembic), shipped in the package and run by maintd itself.

The daemon upgrades the store when it starts (``store.migrate_on_start``), and ``maintd store upgrade``
does it on demand. One transaction does it all, under the store's lock (a PostgreSQL advisory lock;
SQLite's write lock), so replicas that start together migrate once. What it finds decides what it does:

- an empty database: the tables are created from the model (:mod:`maintd.service.schema`) and stamped
  with the newest revision; the tests prove the migrations build the very same schema.
- the tables of maintd 0.1.0, which created its schema without migrations: stamped ``0001`` (that
  schema, see ``versions/v0001_baseline.py``), then upgraded;
- an older revision: upgraded; the newest revision: nothing;
- a revision this maintd does not know: an error, since a newer maintd migrated the store.

The version is kept in ``maintd_alembic_version`` (not Alembic's default name), in ``store.db_schema``
on PostgreSQL, so that maintd's migrations never mix with an application's own in a shared database.

Alembic is imported only to migrate, or to explain a revision other than the newest: :func:`check` (what
``maintd status`` and ``maintd history`` run on every start) reads the recorded revision with one plain query
and compares it with :data:`HEAD_REVISION`.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from maintd.errors import StateStoreSchemaError

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

VERSION_TABLE = "maintd_alembic_version"
LEGACY_REVISION = "0001"
#: The newest revision of ``versions/`` (a test checks it is Alembic's head): what :func:`check` expects.
HEAD_REVISION = "0007"
#: A table every schema maintd ever created holds.
_MARKER_TABLE = "maintd_tables"


def _config(connection: Connection | None = None) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent))
    config.attributes["connection"] = connection
    return config


@functools.cache
def _scripts() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config())


def head() -> str:
    """The newest revision this maintd knows."""
    revision = _scripts().get_current_head()
    assert revision is not None
    return revision


def known(revision: str) -> bool:
    """Whether ``revision`` is one of this maintd's migrations."""
    return revision in {script.revision for script in _scripts().walk_revisions()}


def current(conn: Connection) -> str | None:
    """The revision recorded in the store (None: none recorded)."""
    from alembic.runtime.migration import MigrationContext

    context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def state(conn: Connection) -> str:
    """``empty``, ``legacy`` (maintd 0.1.0's tables, no revision), ``current``, ``behind`` or ``ahead``."""
    revision = current(conn)
    if revision is None:
        return "legacy" if sa.inspect(conn).has_table(_MARKER_TABLE) else "empty"
    if revision == head():
        return "current"
    return "behind" if known(revision) else "ahead"


def upgrade(conn: Connection, metadata: sa.MetaData, where: str) -> tuple[str | None, str]:
    """Bring the store on ``conn`` (in a transaction, under the store's lock) to the newest revision.

    Returns:
        The revision found (None for an empty store or maintd 0.1.0's) and the revision now recorded.

    Raises:
        StateStoreSchemaError: a newer maintd migrated the store.
    """
    from alembic import command
    from alembic.runtime.migration import MigrationContext
    from loguru import logger

    found = state(conn)
    before = current(conn)
    if found == "ahead":
        raise _ahead(before, where)
    if found == "empty":
        metadata.create_all(conn)
        MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).stamp(_scripts(), head())
        logger.info("state store {}: schema created at revision {}", where, head())
        return None, head()
    if found == "legacy":
        MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).stamp(_scripts(), LEGACY_REVISION)
        logger.info("state store {}: found maintd 0.1.0's schema, recorded as revision {}", where, LEGACY_REVISION)
    if found != "current":
        command.upgrade(_config(conn), "head")
        logger.info("state store {}: schema upgraded from revision {} to {}", where, before or LEGACY_REVISION, head())
    return before, head()


def check(conn: Connection, where: str) -> None:
    """Raise unless the store's schema is at the newest revision (for commands that do not migrate).

    Raises:
        StateStoreSchemaError: naming the revisions and what to do.
    """
    if _recorded(conn) == HEAD_REVISION:
        return
    found = state(conn)
    if found == "current":
        return
    if found == "ahead":
        raise _ahead(current(conn), where)
    if found == "empty":
        raise StateStoreSchemaError(f"state store {where} holds no maintd tables; start `maintd daemon` or run "
                              "`maintd store upgrade` to create them")
    revision = current(conn) or f"{LEGACY_REVISION} (maintd 0.1.0)"
    raise StateStoreSchemaError(
        f"state store {where} has schema revision {revision}, older than this maintd's {head()}; run "
        "`maintd store upgrade` (or start the daemon, which upgrades it unless store.migrate_on_start is false)"
    )


def _recorded(conn: Connection) -> str | None:
    """The one revision recorded in the version table, read without Alembic (None: no table, no row, or
    several rows, which :func:`current` then reads and explains)."""
    if not sa.inspect(conn).has_table(VERSION_TABLE):
        return None
    version = sa.table(VERSION_TABLE, sa.column("version_num"))
    rows = conn.execute(sa.select(version.c.version_num).limit(2)).scalars().all()
    return rows[0] if len(rows) == 1 else None


def _ahead(revision: str | None, where: str) -> StateStoreSchemaError:
    return StateStoreSchemaError(
        f"state store {where} has schema revision {revision}, which this maintd does not know (its newest is "
        f"{head()}): a newer maintd migrated it; run that version, or restore the store from before the upgrade"
    )


__all__ = ["HEAD_REVISION", "LEGACY_REVISION", "VERSION_TABLE", "check", "current", "head", "state", "upgrade"]
