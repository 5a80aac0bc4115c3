"""A real Azure Blob Storage server for the tests: Azurite, Microsoft's emulator, on a free loopback port.

:class:`AzureServer` starts ``azurite-blob`` (the Blob service of the emulator: the Blob REST protocol over
HTTP, shared-key authentication, ``If-None-Match: *`` conditional put), keeping its objects in memory, waits
until it answers, creates containers, and hands out the storage options a table needs to reach it.

Azurite is a Node.js program: ``npm ci --prefix tests/azurite`` installs the version pinned in
tests/azurite/package-lock.json (``.ci/run`` does). :func:`azurite_command` finds it there, or at
``MAINTD_AZURITE`` (the path of an ``azurite-blob`` executable), or on the PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

from servers import free_port, listens, stop_server, wait_started

ACCOUNT = "devstoreaccount1"
"""The emulator's well-known development account and key (public: they are in Azurite's documentation)."""
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
INSTALLED = Path(__file__).with_name("azurite") / "node_modules" / ".bin" / "azurite-blob"


def azurite_command() -> str | None:
    """The ``azurite-blob`` executable to start, or None when none is installed."""
    given = os.environ.get("MAINTD_AZURITE")
    if given:
        return given
    if INSTALLED.exists():
        return str(INSTALLED)
    return shutil.which("azurite-blob")


class AzureServer:
    def __init__(self, log_dir: Path, command: str) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}/{ACCOUNT}"
        self.log = open(log_dir / f"azurite-{self.port}.log", "wb")  # noqa: SIM115
        # --loose: accept headers the emulator does not implement instead of failing the request;
        # --skipApiVersionCheck: obstore and pyarrow may speak a newer REST API version than this Azurite
        self.proc = subprocess.Popen(
            [command, "--blobHost", "127.0.0.1", "--blobPort", str(self.port), "--inMemoryPersistence",
             "--loose", "--skipApiVersionCheck"],
            stdout=self.log, stderr=subprocess.STDOUT)

        wait_started(self.proc, self.log, lambda: listens(self.port), f"azurite-blob on {self.endpoint}")

    @property
    def options(self) -> dict[str, str]:
        """Storage options reaching this server (what ``configure_storage`` takes)."""
        return {"azure_storage_account_name": ACCOUNT, "azure_storage_account_key": ACCOUNT_KEY,
                "azure_endpoint": self.endpoint, "azure_allow_http": "true"}

    @property
    def env(self) -> dict[str, str]:
        """The standard Azure environment reaching this server (for subprocesses: CLI, writers, Spark workers)."""
        return {"AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT, "AZURE_STORAGE_ACCOUNT_KEY": ACCOUNT_KEY,
                "AZURE_STORAGE_ENDPOINT": self.endpoint, "AZURE_ALLOW_HTTP": "true"}

    def account_sas(self, *, expiry: str = "2099-01-01T00:00:00Z") -> str:
        """An account SAS token for every blob operation (``sv=...&sig=...``, without a leading ``?``), signed
        with the account key as Azure's account SAS is (the string to sign of service version 2020-12-06)."""
        import base64
        import hashlib
        import hmac
        from urllib.parse import quote

        fields = {"sv": "2021-08-06", "ss": "b", "srt": "sco", "sp": "rwdlacup", "se": expiry, "spr": "https,http"}
        to_sign = "\n".join([ACCOUNT, fields["sp"], fields["ss"], fields["srt"], "", fields["se"], "",
                             fields["spr"], fields["sv"], "", ""])
        sig = base64.b64encode(hmac.new(base64.b64decode(ACCOUNT_KEY), to_sign.encode(), hashlib.sha256).digest())
        return "&".join(f"{k}={quote(v, safe='')}" for k, v in {**fields, "sig": sig.decode()}.items())

    def sas_options(self, sas: str) -> dict[str, str]:
        """Storage options reaching this server with a SAS token instead of the account key."""
        return {"azure_storage_account_name": ACCOUNT, "azure_storage_sas_key": sas,
                "azure_endpoint": self.endpoint, "azure_allow_http": "true"}

    def create_container(self, name: str | None = None) -> str:
        import pyarrow.fs as pafs

        name = name or f"c-{uuid.uuid4().hex[:20]}"
        authority = f"127.0.0.1:{self.port}"
        pafs.AzureFileSystem(account_name=ACCOUNT, account_key=ACCOUNT_KEY, blob_storage_authority=authority,
                             dfs_storage_authority=authority, blob_storage_scheme="http",
                             dfs_storage_scheme="http").create_dir(name)
        return name

    def stop(self) -> None:
        stop_server(self.proc, self.log)
