"""A real S3 server for the tests: the moto standalone server on a free loopback port.

:class:`S3Server` starts the moto server (S3 protocol over HTTP, conditional put honoured and made atomic
by ``tests/s3app.py``), waits until it answers, creates buckets, and hands out the storage options and
environment a table (or a subprocess) needs to reach it. The pytest fixtures in tests/conftest.py start one
per test session (``s3_server``, ``s3_root``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from servers import free_port, stop_server, wait_started

ACCESS_KEY = "testing-access-key"
SECRET_KEY = "testing-secret-key-never-shown"
REGION = "us-east-1"
LAUNCHER = Path(__file__).with_name("s3app.py")


class S3Server:
    def __init__(self, log_dir: Path) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        try:
            import moto.moto_server.werkzeug_app  # noqa: F401 - only to fail early with the fix named
        except ImportError:
            raise RuntimeError("the moto server is not installed: install the test extra (moto[server])") from None
        self.log = open(log_dir / f"moto-{self.port}.log", "wb")  # noqa: SIM115
        # moto's own application, with conditional puts made atomic as on S3 (see tests/s3app.py)
        self.proc = subprocess.Popen([sys.executable, str(LAUNCHER), "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=self.log, stderr=subprocess.STDOUT)

        wait_started(self.proc, self.log, self._answers, f"moto_server on {self.endpoint}")

    def _answers(self) -> bool:
        urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=2).close()
        return True

    @property
    def options(self) -> dict[str, str]:
        """Storage options reaching this server (what ``configure_storage`` takes)."""
        return {"aws_endpoint": self.endpoint, "aws_access_key_id": ACCESS_KEY,
                "aws_secret_access_key": SECRET_KEY, "aws_region": REGION, "aws_allow_http": "true"}

    @property
    def env(self) -> dict[str, str]:
        """The standard AWS environment reaching this server (for subprocesses: CLI, writers, Spark workers)."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION, "AWS_ALLOW_HTTP": "true",
                "AWS_EC2_METADATA_DISABLED": "true"}

    def requests(self, bucket: str) -> list[str]:
        """The request lines the server has logged for ``bucket`` so far (``"PUT /bucket/key HTTP/1.1"``)."""
        self.log.flush()
        with open(self.log.name, encoding="utf-8", errors="replace") as f:
            lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).split('"') for line in f if line.count('"') >= 2]
        return [parts[1] for parts in lines if len(parts[1].split(" ")) > 1
                and parts[1].split(" ")[1].split("?")[0].strip("/").split("/")[0] == bucket]

    def child_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        return {**(os.environ if base is None else base), **self.env}

    def set_modes(self, bucket: str, **modes: Any) -> None:
        """Switch on, for ``bucket``, habits of real stores that moto hides (tests/s3app.py): ``unordered=True``
        (listings in no lexical order), ``conflicts=True`` (409 ConditionalRequestConflict on concurrent
        conditional writes of a key), ``slow_ms=N`` (with ``slow_methods``, ``slow_keys``). No argument: off."""
        req = urllib.request.Request(f"{self.endpoint}/_maintd/modes/{bucket}", method="PUT",
                                     data=json.dumps(modes).encode())
        urllib.request.urlopen(req, timeout=10).close()

    def create_bucket(self, name: str | None = None) -> str:
        name = name or f"b-{uuid.uuid4().hex[:20]}"
        req = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        urllib.request.urlopen(req, timeout=10).close()
        return name

    def stop(self) -> None:
        stop_server(self.proc, self.log)
