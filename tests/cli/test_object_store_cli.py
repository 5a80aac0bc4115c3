"""Every CLI command on a table in S3 (a moto server) answers as on local disk, and every bad storage input
(unknown scheme, missing bucket, missing credentials, unreachable endpoint) is one line and exit code 2."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3server import free_port

from maintd import Table
from maintd.redaction import forget_secrets
from maintd.storage import clear_storage_options, configure_storage

SCHEMA = "id:int64,name:string,amount:float64"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    clear_storage_options()
    yield
    clear_storage_options()
    forget_secrets()


def maintd_cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "maintd", *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MAINTD_"))}
    env.update(AWS_CONFIG_FILE=str(tmp_path / "none"), AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
               AWS_EC2_METADATA_DISABLED="true", MAINTD_STATE_DIR=str(tmp_path / "state"), **extra)
    return env


@pytest.mark.spark
def test_the_demo_runs_on_s3(s3_server: Any, s3_root: str, spark: Any) -> None:
    from rich.console import Console

    from maintd.cli.demo import run_demo

    console = Console(record=True, width=160)
    assert run_demo(console, f"{s3_root}/demo", batches=30, rows=150, spark=spark), console.export_text()
    text = console.export_text()
    assert "rows read before and after are identical" in text and f"{s3_root}/demo/orders" in text
    assert Table.open(f"{s3_root}/demo/orders").version > 30
