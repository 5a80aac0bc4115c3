"""The table format: log, snapshots, transactions, writers and the merge-on-read reader."""

from maintd.table.log.actions import AddFile, CommitInfo, Metadata, Pin, Protocol, RemoveFile, Txn
from maintd.table.log.retry import RetryPolicy
from maintd.table.log.snapshot import Snapshot
from maintd.table.read.scan import TableScan
from maintd.table.table import CommitRecord, DataFileInfo, Table
from maintd.table.transaction import Transaction

__all__ = ["AddFile", "CommitInfo", "CommitRecord", "DataFileInfo", "Metadata", "Pin", "Protocol", "RemoveFile",
           "RetryPolicy", "Snapshot", "Table", "TableScan", "Transaction", "Txn"]
