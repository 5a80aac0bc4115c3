"""Fixtures of the service tests: one state store per backend (SQLite file, PostgreSQL schema)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from maintd.service.store import StateStore

POSTGRES_ENV = "MAINTD_TEST_POSTGRES_URL"


@dataclass(frozen=True)
class StoreTarget:
    """Where a test store lives: its URL and (on PostgreSQL) a schema private to the test."""

    backend: str
    url: str
    db_schema: str | None

    def open(self) -> StateStore:
        return StateStore(self.url, db_schema=self.db_schema)


def _postgres_url() -> str:
    url = os.environ.get(POSTGRES_ENV)
    if not url:
        pytest.skip(f"{POSTGRES_ENV} is not set (e.g. postgresql+psycopg://postgres@127.0.0.1:5432/test); CI sets it")
    return url


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StoreTarget]:
    """A fresh, empty store location per test, on each backend."""
    if request.param == "sqlite":
        path = tmp_path_factory.mktemp("store") / "maintd.db"
        yield StoreTarget("sqlite", f"sqlite:///{path}", None)
        return
    target = StoreTarget("postgresql", _postgres_url(), f"maintd_test_{uuid.uuid4().hex[:12]}")
    yield target
    cleanup = StateStore(target.url, db_schema=target.db_schema, create=False)
    try:
        cleanup.drop_schema()
    finally:
        cleanup.close()


@pytest.fixture
def store(store_target: StoreTarget) -> Iterator[StateStore]:
    """An open state store with its schema created."""
    opened = store_target.open()
    try:
        yield opened
    finally:
        opened.close()
