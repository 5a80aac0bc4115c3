"""Imported by the fork server of :mod:`maintd.execution.local` only, never by maintd itself: it imports what a
unit runs and makes pyarrow's first conversion of numpy data (:func:`~maintd.worker_preload.preload_worker`), so
every child forked from the server starts with all of it. Without it each child paid that first conversion
(pandas' set-up behind it) in its first unit's read, many times what the fork costs (docs/benchmarks.md, "Small
plans in process"). It starts no thread, so the fork stays safe."""

from maintd.worker_preload import preload_worker

preload_worker()
