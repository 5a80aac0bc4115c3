"""The layered table (BaseFile, level-0/1/2 DeltaFiles) is built once and only read by the engine tests."""

from __future__ import annotations

from typing import Any

import pytest

from maintd import Table

from .helpers import layered_table


@pytest.fixture(scope="session")
def layered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Table, Any, dict[str, int]]:
    return layered_table(tmp_path_factory.mktemp("layered"))
