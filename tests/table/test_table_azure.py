"""What only tables on Azure Blob Storage do (an Azurite server started by the tests): plain HTTP allowed only when
asked, with a hint naming Azure, and a table reached with an account SAS token, with or without its leading ``?``.

Commits are ``If-None-Match: *`` puts through obstore's ``AzureStore``; data files stream through pyarrow's
``AzureFileSystem``. The Table API, racing committers and real processes on Azure (as on local disk and S3) are in
test_table_stores.py; ``maintd run`` in tests/execution/test_run_stores.py; reclamation, orphans, PURGE and ``gc``
from the CLI in tests/reclaim/test_reclaim_stores.py.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from maintd import Table
from maintd.errors import StorageConfigError
from maintd.storage import clear_storage_options, configure_storage

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("ds", pa.string()), ("name", pa.string())])


def test_plain_http_must_be_allowed_and_the_hint_names_azure(azure_server: Any) -> None:
    container = azure_server.create_container()
    configure_storage(f"az://{container}",
                      {k: v for k, v in azure_server.options.items() if k != "azure_allow_http"})
    try:
        with pytest.raises(StorageConfigError) as err:
            Table.open(f"az://{container}/t")
    finally:
        clear_storage_options()
    assert "AZURE_ALLOW_HTTP=true" in str(err.value) and "azure_allow_http" in str(err.value)
    assert "AWS" not in str(err.value)


@pytest.mark.parametrize("lead", ["", "?"])
def test_a_table_reached_with_a_sas_token_reads_and_writes_its_data_files_with_or_without_a_leading_mark(
        azure_server: Any, lead: str) -> None:
    """The log (obstore) took a SAS token either way; the data files (pyarrow, which appends the token to each
    URL as it is given) failed without the leading ``?``."""
    from maintd.storage import clear_storage_options, configure_storage

    container = azure_server.create_container()
    configure_storage(f"az://{container}", azure_server.sas_options(lead + azure_server.account_sas()))
    try:
        table = Table.create(f"az://{container}/t", "id:int64!,v:string", primary_key="id", buckets=2)
        table.upsert(pa.Table.from_pylist([{"id": i, "v": "x"} for i in range(10)]))
        assert Table.open(f"az://{container}/t").read().num_rows == 10
    finally:
        clear_storage_options()
