"""The transaction log of a table: actions, commit files, checkpoints, snapshots and committing.

Owns: the action models (what the log holds), naming and publishing commit files, checkpoints, the
snapshot a log replays to, the timeline (commit times, time travel, retention), whether an attempt
landed, the conflict rules between concurrent commits, retry budgets and the table properties.

May import: :mod:`maintd.storage`, :mod:`maintd.errors` and libraries; nothing else of :mod:`maintd.table`
(the data files and the reads sit above it). Enforced by the import contracts in pyproject.toml.
"""
