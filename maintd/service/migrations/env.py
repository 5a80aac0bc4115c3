"""Alembic's environment for the state store: migrations run on the connection maintd hands over.

maintd never runs Alembic from a command line of Alembic's: :mod:`maintd.service.migrations` opens the
transaction (under the store's lock), puts the connection in ``config.attributes["connection"]`` and
calls Alembic's ``command.upgrade``, which runs this file.
"""

from __future__ import annotations

from alembic import context

from maintd.service.migrations import VERSION_TABLE
from maintd.service.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, version_table=VERSION_TABLE)
with context.begin_transaction():
    context.run_migrations()
