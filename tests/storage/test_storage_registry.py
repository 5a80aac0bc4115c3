"""The scheme registry: maintd's own storages are named, imported on the first use of their scheme, and behave as
if registered from the start."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from maintd.errors import UnknownSchemeError
from maintd.storage import LocalStorage, Storage, register_storage, storage_for_uri, unregister_storage
from maintd.storage.base import BUILTIN_STORAGES, is_builtin_storage
from maintd.storage.options import FAMILIES


def test_every_object_store_scheme_and_local_paths_have_a_builtin_storage() -> None:
    assert set(BUILTIN_STORAGES) == {"file", *FAMILIES}


def test_a_storage_module_registers_nothing_on_import_and_a_lookup_imports_only_its_own() -> None:
    script = textwrap.dedent("""
        import json, sys
        import maintd.storage.local, maintd.storage.base as base
        imported = list(base._FACTORIES)
        base.storage_for_uri(sys.argv[1])
        local = sorted(base._FACTORIES), "maintd.storage.objectstore" in sys.modules, "obstore" in sys.modules
        base.storage_for_uri("s3://bucket/t")
        print(json.dumps([imported, *local, sorted(base._FACTORIES)]))
    """)
    out = subprocess.run([sys.executable, "-c", script, "/tmp/t"], capture_output=True, text=True, check=True)
    imported, after_local, objectstore, obstore, after_s3 = json.loads(out.stdout)
    assert imported == [] and after_local == ["file"] and not objectstore and not obstore
    assert after_s3 == ["file", "s3"]


def test_replacing_a_builtin_before_its_first_use_returns_it_and_stands(tmp_path: Path) -> None:
    made: list[str] = []

    def factory(uri: str) -> Storage:
        made.append(uri)
        return LocalStorage(str(tmp_path))

    previous = register_storage("abfs", factory)
    try:
        assert previous is not None and previous.__name__ == "object_store_factory"
        assert not is_builtin_storage("abfs://c@a/t")
        assert isinstance(storage_for_uri("abfs://c@a/t"), LocalStorage) and made == ["abfs://c@a/t"]
        unregister_storage("abfs")
        with pytest.raises(UnknownSchemeError):
            storage_for_uri("abfs://c@a/t")
    finally:
        register_storage("abfs", previous)
    assert is_builtin_storage("abfs://c@a/t")


def test_a_scheme_of_its_own_is_served_and_is_not_builtin(tmp_path: Path) -> None:
    assert register_storage("mem", lambda uri: LocalStorage(str(tmp_path))) is None
    try:
        assert isinstance(storage_for_uri("mem://t"), LocalStorage) and not is_builtin_storage("mem://t")
    finally:
        unregister_storage("mem")
    with pytest.raises(UnknownSchemeError) as err:
        storage_for_uri("mem://t")
    known = str(err.value).split("one of ", 1)[1]
    assert "s3://" in known and "abfss://" in known and "mem://" not in known
