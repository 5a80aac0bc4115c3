"""A fault-injecting storage: wraps any :class:`~maintd.storage.Storage` and makes its operations fail,
stall, succeed without saying so, or kill the process, by rule or at random with a seed.

It exists to prove the log's promises (an acknowledged commit is always visible, a commit reported as not
landed never is, nothing outside the table is touched) under the failures real storages have:

* ``fail``: the operation raises before it applies (a refused request).
* ``fail_after``: it applies, then raises (the answer got lost: normal on object stores and NFS, and the
  reason every commit must be able to tell whether it landed).
* ``delay``: it sleeps first (widens race windows between processes);
* ``crash`` / ``crash_after``: the process is killed with SIGKILL before / after the operation applies,
  which stops it at a named step (``put_if_absent`` of ``_log/*.json`` is "publishing a commit",
  ``delete`` of ``*.parquet`` is "deleting a data file"...).

A :class:`FaultPlan` holds the rules, one seeded random generator and the call counters; every storage it
wraps shares them, so "the 7th storage operation of this process" means the same thing however many
``Table`` objects the process opens. :meth:`FaultPlan.install` wraps the storages that
:func:`~maintd.storage.storage_for_uri` builds for a scheme (a CLI process, maintenance tasks), and
:meth:`FaultPlan.wrap` one storage object. Data files are covered too: :attr:`FaultyStorage.filesystem`
is a pyarrow filesystem whose opens go through the same rules (operations ``open_input``,
``open_output``, ``file_info``).

Rules are plain data (:meth:`FaultPlan.to_json` / :meth:`FaultPlan.from_json`) so a test can hand them
to a subprocess.
"""

from __future__ import annotations

import errno
import fnmatch
import functools
import json
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypeVar

import pyarrow.fs as pafs

from maintd.storage.base import FileInfo, Storage, StorageFactory, register_storage, unregister_storage

T = TypeVar("T")

FaultKind = Literal["fail", "fail_after", "delay", "crash", "crash_after"]
OPERATIONS = ("put_if_absent", "write_atomic", "update_atomic", "read", "exists", "list_dir", "list_first", "walk",
              "delete", "makedirs", "make_durable", "open_input", "open_output", "file_info")
"""The operations rules can name (``*`` and other ``fnmatch`` patterns match several)."""

Observer = Callable[[str, str, bytes | None, Any], None]
"""Called with (operation, path, data, result) right after an operation applied, before a ``fail_after`` or
``crash_after`` rule takes effect: what a test needs to know what really happened on storage (for
``put_if_absent``, ``result`` says whether the file was created)."""


class InjectedFault(OSError):
    """An injected storage failure (an ``OSError`` with ``errno.EIO``, as a real I/O error would be)."""

    def __init__(self, op: str, path: str, *, applied: bool) -> None:
        what = "after it applied" if applied else "before it applied"
        super().__init__(errno.EIO, f"injected failure of {op} {path} ({what})")
        self.op, self.path, self.applied = op, path, applied


@dataclass(frozen=True)
class Fault:
    """One rule: the calls it matches (operation and path patterns), what it does, and how often.

    Attributes:
        kind: ``fail``, ``fail_after``, ``delay``, ``crash`` or ``crash_after`` (module docstring).
        op: an operation name of :data:`OPERATIONS`, or an ``fnmatch`` pattern over them.
        path: an ``fnmatch`` pattern over the table-relative path (``_log/*.json``: commit files).
        nth: fire only at the n-th matching call (1-based), counted per rule over the whole plan.
        times: fire at most this many times (None: no limit).
        probability: fire with this probability (drawn from the plan's seeded generator).
        seconds: how long a ``delay`` sleeps (uniform in [0, seconds] when ``probability`` < 1).
    """

    kind: FaultKind
    op: str = "*"
    path: str = "*"
    nth: int | None = None
    times: int | None = None
    probability: float = 1.0
    seconds: float = 0.0

    def matches(self, op: str, path: str) -> bool:
        return fnmatch.fnmatchcase(op, self.op) and fnmatch.fnmatchcase(path, self.path)


@dataclass(frozen=True)
class Fired:
    """A rule that took effect: which, on what, and as the how-many-th storage call of the plan."""

    kind: FaultKind
    op: str
    path: str
    call: int


@dataclass
class FaultPlan:
    """Rules, a seeded generator and counters shared by every storage wrapped with this plan."""

    faults: Sequence[Fault] = ()
    seed: int = 0
    observer: Observer | None = None
    fired: list[Fired] = field(default_factory=list)
    calls: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.faults = tuple(self.faults)
        self._rng = random.Random(self.seed)
        self._matched = [0] * len(self.faults)
        self._fired = [0] * len(self.faults)
        self._lock = threading.Lock()
        self._installed: dict[str, StorageFactory | None] = {}

    # -- changing the rules -------------------------------------------------------------------------
    def add(self, *faults: Fault) -> None:
        """Arm more rules from now on (an observer may arm one when something happened)."""
        with self._lock:
            self.faults = (*self.faults, *faults)
            self._matched += [0] * len(faults)
            self._fired += [0] * len(faults)

    def clear(self) -> None:
        """Disarm every rule (the counters of calls and the record of what fired are kept)."""
        with self._lock:
            self.faults, self._matched, self._fired = (), [], []

    # -- building and sharing -----------------------------------------------------------------------
    def wrap(self, storage: Storage) -> FaultyStorage:
        return FaultyStorage(storage, self)

    def install(self, scheme: str = "file") -> None:
        """Wrap every storage :func:`~maintd.storage.storage_for_uri` builds for ``scheme`` from now on."""
        previous = register_storage(scheme, lambda uri: self.wrap(self._inner_factory(scheme)(uri)))
        self._installed.setdefault(scheme, previous)

    def uninstall(self) -> None:
        for scheme, previous in self._installed.items():
            if previous is None:
                unregister_storage(scheme)
            else:
                register_storage(scheme, previous)
        self._installed.clear()

    def _inner_factory(self, scheme: str) -> StorageFactory:
        previous = self._installed.get(scheme)
        if previous is None:
            raise RuntimeError(f"no storage was registered for scheme {scheme!r} before the faults were installed")
        return previous

    def to_json(self) -> str:
        return json.dumps({"seed": self.seed, "faults": [asdict(f) for f in self.faults]})

    @classmethod
    def from_json(cls, text: str, *, observer: Observer | None = None) -> FaultPlan:
        doc = json.loads(text)
        return cls([Fault(**f) for f in doc.get("faults", [])], seed=int(doc.get("seed", 0)), observer=observer)

    # -- deciding -----------------------------------------------------------------------------------
    def decide(self, op: str, path: str) -> tuple[list[FaultKind], float]:
        """The kinds of rule that fire for this call, and the seconds to sleep first."""
        kinds: list[FaultKind] = []
        sleep = 0.0
        with self._lock:
            self.calls[op] += 1
            call = sum(self.calls.values())
            for i, rule in enumerate(self.faults):
                if not rule.matches(op, path):
                    continue
                self._matched[i] += 1
                if rule.nth is not None and self._matched[i] != rule.nth:
                    continue
                if rule.times is not None and self._fired[i] >= rule.times:
                    continue
                if rule.probability < 1.0 and self._rng.random() >= rule.probability:
                    continue
                self._fired[i] += 1
                self.fired.append(Fired(rule.kind, op, path, call))
                if rule.kind == "delay":
                    sleep += rule.seconds * (self._rng.random() if rule.probability < 1.0 else 1.0)
                else:
                    kinds.append(rule.kind)
        return kinds, sleep

    def call(self, op: str, path: str, fn: Callable[[], T], data: bytes | None = None) -> T:
        """Run ``fn`` (the real operation on ``path``) under the rules that fire for it."""
        kinds, sleep = self.decide(op, path)
        if sleep:
            time.sleep(sleep)
        return self.call_decided(op, path, kinds, fn, data)

    def call_decided(self, op: str, path: str, kinds: list[FaultKind], fn: Callable[[], T],
                     data: bytes | None = None) -> T:
        """Run ``fn`` under rules already decided (:meth:`decide`) for this call."""
        if "crash" in kinds:
            _kill()
        if "fail" in kinds:
            raise InjectedFault(op, path, applied=False)
        result = fn()
        if self.observer is not None:
            self.observer(op, path, data, result)
        if "crash_after" in kinds:
            _kill()
        if "fail_after" in kinds:
            raise InjectedFault(op, path, applied=True)
        return result


def _kill() -> None:
    """Stop this process at once, as a power cut or an OOM kill would: no cleanup, no flush."""
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # pragma: no cover - the signal is delivered before this returns


class FaultyStorage(Storage):
    """``inner`` with every operation going through ``plan``'s rules."""

    def __init__(self, inner: Storage, plan: FaultPlan) -> None:
        self.inner = inner
        self.plan = plan
        self._fs = pafs.PyFileSystem(_FaultyHandler(self))

    @property  # type: ignore[override]
    def lists_in_order(self) -> bool:  # the inner storage may learn at run time that its store does not
        return self.inner.lists_in_order

    @lists_in_order.setter
    def lists_in_order(self, value: bool) -> None:
        self.inner.lists_in_order = value

    @property
    def uri(self) -> str:
        return self.inner.uri

    @property
    def filesystem(self) -> pafs.FileSystem:
        return self._fs

    def full_path(self, path: str) -> str:
        return self.inner.full_path(path)

    def at(self, uri: str) -> Storage:
        return self.plan.wrap(self.inner.at(uri))

    def relative(self, full: str) -> str:
        """The table-relative path of a path of :attr:`filesystem` (for matching rules)."""
        prefix = self.inner.full_path("_")[:-1]  # the root as the filesystem spells it ("bucket/prefix/" on S3)
        return full[len(prefix):] if full.startswith(prefix) else full

    def put_if_absent(self, path: str, data: bytes) -> bool:
        return self.plan.call("put_if_absent", path, lambda: self.inner.put_if_absent(path, data), data)

    def write_atomic(self, path: str, data: bytes) -> None:
        self.plan.call("write_atomic", path, lambda: self.inner.write_atomic(path, data), data)

    def update_atomic(self, path: str, change: Callable[[bytes | None], bytes | None]) -> bytes | None:
        return self.plan.call("update_atomic", path, lambda: self.inner.update_atomic(path, change))

    def delete_many(self, paths: Sequence[str]) -> dict[str, Exception]:
        """Each path under the rules for ``delete`` (a rule can fail or kill at the n-th file), the paths the
        rules let through deleted by the inner storage in bulk, in the order given."""
        failed: dict[str, Exception] = {}
        batch: list[str] = []

        def flush() -> None:
            errors = self.inner.delete_many(batch)
            failed.update(errors)
            if self.plan.observer is not None:
                for p in batch:
                    if p not in errors:
                        self.plan.observer("delete", p, None, True)
            batch.clear()

        for path in paths:
            kinds, sleep = self.plan.decide("delete", path)
            if sleep:
                time.sleep(sleep)
            if kinds:
                flush()
                try:
                    self.plan.call_decided("delete", path, kinds, functools.partial(self.inner.delete, path))
                except InjectedFault as exc:
                    failed[path] = exc
            else:
                batch.append(path)
        flush()
        return failed

    def read(self, path: str) -> bytes:
        return self.plan.call("read", path, lambda: self.inner.read(path))

    def exists(self, path: str) -> bool:
        return self.plan.call("exists", path, lambda: self.inner.exists(path))

    def list_dir(self, path: str) -> list[FileInfo]:
        return self.plan.call("list_dir", path, lambda: self.inner.list_dir(path))

    def list_first(self, path: str, limit: int) -> list[FileInfo]:
        return self.plan.call("list_first", path, lambda: self.inner.list_first(path, limit))

    def walk(self, path: str = "") -> list[FileInfo]:
        return self.plan.call("walk", path, lambda: self.inner.walk(path))

    def delete(self, path: str) -> bool:
        return self.plan.call("delete", path, lambda: self.inner.delete(path))

    def makedirs(self, path: str) -> None:
        self.plan.call("makedirs", path, lambda: self.inner.makedirs(path))

    def make_durable(self, path: str) -> None:
        self.plan.call("make_durable", path, lambda: self.inner.make_durable(path))


class _FaultyHandler(pafs.FileSystemHandler):  # type: ignore[misc]
    """The pyarrow side of :class:`FaultyStorage`: data-file opens and stats go through the plan's rules."""

    def __init__(self, storage: FaultyStorage) -> None:
        self.storage = storage
        self.fs = storage.inner.filesystem

    def _call(self, op: str, path: str, fn: Callable[[], T]) -> T:
        return self.storage.plan.call(op, self.storage.relative(path), fn)

    def get_type_name(self) -> str:
        return "maintd-faulty"

    def normalize_path(self, path: str) -> str:
        return str(self.fs.normalize_path(path))

    def get_file_info(self, paths: Iterable[str]) -> list[pafs.FileInfo]:
        paths = list(paths)
        return self._call("file_info", paths[0] if paths else "", lambda: self.fs.get_file_info(paths))

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        return self._call("file_info", selector.base_dir, lambda: self.fs.get_file_info(selector))

    def create_dir(self, path: str, recursive: bool) -> None:
        self._call("makedirs", path, lambda: self.fs.create_dir(path, recursive=recursive))

    def delete_dir(self, path: str) -> None:
        self._call("delete", path, lambda: self.fs.delete_dir(path))

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self._call("delete", path, lambda: self.fs.delete_dir_contents(path, missing_dir_ok=missing_dir_ok))

    def delete_root_dir_contents(self) -> None:
        raise PermissionError("maintd never empties a filesystem root")

    def delete_file(self, path: str) -> None:
        self._call("delete", path, lambda: self.fs.delete_file(path))

    def move(self, src: str, dest: str) -> None:
        self._call("write_atomic", dest, lambda: self.fs.move(src, dest))

    def copy_file(self, src: str, dest: str) -> None:
        self._call("open_output", dest, lambda: self.fs.copy_file(src, dest))

    def open_input_stream(self, path: str) -> Any:
        return self._call("open_input", path, lambda: self.fs.open_input_stream(path))

    def open_input_file(self, path: str) -> Any:
        return self._call("open_input", path, lambda: self.fs.open_input_file(path))

    def open_output_stream(self, path: str, metadata: Any) -> Any:
        return self._call("open_output", path, lambda: self.fs.open_output_stream(path, metadata=metadata))

    def open_append_stream(self, path: str, metadata: Any) -> Any:
        return self._call("open_output", path, lambda: self.fs.open_append_stream(path, metadata=metadata))


__all__ = ["OPERATIONS", "Fault", "FaultKind", "FaultPlan", "FaultyStorage", "Fired", "InjectedFault", "Observer"]
