"""Data files: their schema, buckets, keys, encodings, writing and merging row versions.

Owns: the Arrow schema of a table and of its files, the bucket function, the Parquet layout and
statistics of DeltaFiles and BaseFiles, dictionaries, and merge kernels ("greatest version wins"). Also keys
(their one order and key ranges: :mod:`~maintd.table.files.keys`), partition values as text
(:mod:`~maintd.table.files.partitions`), row filters and what they let a reader skip
(:mod:`~maintd.table.files.pruning`), schema evolution's null-filling, and writing a batch as level-0 DeltaFiles.

May import: :mod:`maintd.table.log` (the actions a file is recorded by), :mod:`maintd.storage` and
libraries; never :mod:`maintd.table.read` or the Table API above it.
"""
