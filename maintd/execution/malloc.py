"""The machine's jemalloc as the ``malloc`` of the processes that run units on this machine: the lanes of small
plans (:mod:`maintd.execution.local`) and the Python workers of a local Spark session (:mod:`maintd.execution.spark`).

A unit of many small Parquet files makes the Parquet reader allocate and free a few small C++ objects for every
column chunk it reads, and those come from the C library's ``malloc``; jemalloc serves them faster than glibc's
(docs/benchmarks.md, "jemalloc in the lanes and the local Spark workers"). The lanes take Arrow's buffers from it
too (:data:`maintd.execution.local.LANE_ALLOCATORS`); the Spark workers keep Arrow's own jemalloc for them.
Nothing is preloaded where the machine has no jemalloc (Debian's ``libjemalloc2``, installed in the
image), where this process's environment names a preload of its own (``LD_PRELOAD``, even empty: the way to keep
glibc's), nor for executors on other machines, whose images may lack the library.
"""

from __future__ import annotations

import ctypes.util
import functools
import os

JEMALLOC = "jemalloc"


@functools.cache
def system_jemalloc() -> str | None:
    """The machine's jemalloc by its library name (``libjemalloc.so.2``), for ``LD_PRELOAD``; None without one.
    Looked up once: it may start ``ldconfig``."""
    return ctypes.util.find_library(JEMALLOC)


def preload() -> str | None:
    """What the processes that run units on this machine preload: the machine's jemalloc, unless this process's
    environment names a preload of its own (then they inherit that one)."""
    return None if "LD_PRELOAD" in os.environ else system_jemalloc()
