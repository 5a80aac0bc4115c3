"""A table the user cannot write: a permission error is certain, so the command fails at once, in one line,
naming the path (it used to retry for 20 s, print 42 warnings and then say that whether the change landed
"cannot be known", though nothing could be written).

The command runs in a mount namespace where the table's directory is a read-only bind mount: a real refusal of
the filesystem (``EROFS``), which permission bits could not give a root user. Without user and mount namespaces
(``unshare``) the tests are skipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from maintd import Table

READ_ONLY = 'mount --bind "$1" "$1" && mount -o bind,remount,ro "$1" && shift && exec "$@"'


@pytest.fixture(scope="module", autouse=True)
def _namespaces() -> None:
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"user and mount namespaces are not available here: {probe.stderr.decode().strip()}")


def on_read_only(directory: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """``maintd ARGS`` with ``directory`` mounted read-only (in a mount namespace of its own)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAINTD_")}
    started = time.monotonic()
    done = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", READ_ONLY, "ro",
                           str(directory), sys.executable, "-m", "maintd", *args], env=env, capture_output=True,
                          text=True, timeout=120)
    return done, time.monotonic() - started


def test_set_properties_on_a_table_the_user_cannot_write_fails_at_once_naming_the_path(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = Table.create(uri, "id:int64!", primary_key="id", buckets=1)
    table.upsert(pa.table({"id": [1]}))
    done, seconds = on_read_only(tmp_path / "t", "table", "set-properties", uri, "--property",
                                 "acid.data.retain.hours=5")
    assert done.returncode != 0 and seconds < 10, (seconds, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "Read-only file system" in lines[0] and f"{uri}/_log" in lines[0] and "nothing was written" in lines[0]
    assert "cannot be known" not in done.stderr and Table.open(uri).version == 1


def test_create_under_a_parent_the_user_cannot_write_fails_at_once_naming_the_path(tmp_path: Path) -> None:
    parent = tmp_path / "warehouse"
    parent.mkdir()
    done, seconds = on_read_only(parent, "table", "create", str(parent / "t"), "--schema", "id:int64!",
                                 "--primary-key", "id")
    assert done.returncode != 0 and seconds < 10, (seconds, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Read-only file system" in lines[0] and str(parent) in lines[0], done.stderr
    assert "cannot be known" not in done.stderr and not (parent / "t").exists()
