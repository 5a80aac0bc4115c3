"""The change feed: net changes of a table in (start, end], read from what changed, not from two full reads.

A key's visible state can differ between two versions only if a data-changing commit in between wrote a row
of it (an upsert or a delete in a level-0 file) or took away a file holding it (an overwrite). So the feed
reads, for each (partition, bucket) group holding a changed key, the rows of the changed keys at both versions,
and diffs the two small states exactly as the full diff does. Maintenance commits (``data_change=false``) move
rows between files without changing any: their files are read for the states only.

How a group is read is a *strategy* (:class:`~maintd.table.read.feed.base.Strategy`, one module each), asked
in the order of :data:`~maintd.table.read.feed.driver.STRATEGIES`; the first that can answer reads the group:

1. :mod:`.record`: a compaction's prior-rows files hold every row the states need (no data file read);
2. :mod:`.answered`: prior-rows files hold the changed rows and answer for every other row;
3. :mod:`.changedrows`: prior-rows files hold the changed rows; the rest is read from data files;
4. :mod:`.datafiles`: the changed files are read whole, the rest for their keys (prior-rows files standing in
   for the files they answer for, :mod:`.keys`);
5. :mod:`.fulldiff`: both states read whole, when the changed files are not known (and as the reference).

:mod:`.driver` plans the groups and runs the strategies, :mod:`.diff` diffs the states, :mod:`.priors` reads
prior-rows files. The result equals :func:`changes_between` (property tests check this on random histories).
"""

from maintd.table.read.feed.base import Strategy
from maintd.table.read.feed.diff import CHANGE_COLUMN, CHANGE_VERSION_COLUMN, diff_states, state_schema
from maintd.table.read.feed.driver import STRATEGIES, changed_files, changes_between, net_changes
from maintd.table.read.feed.priors import GroupPriors, Held

__all__ = ["CHANGE_COLUMN", "CHANGE_VERSION_COLUMN", "STRATEGIES", "GroupPriors", "Held", "Strategy",
           "changed_files", "changes_between", "diff_states", "net_changes", "state_schema"]
