"""The model check: random scenarios of writer processes, maintenance and reclamation on failing storage,
every retained version checked against a model of the rows, and the two promises of the log checked.

One scenario (seeded):

1. a table (partitioned, 2 buckets, retention 0 or 1 hour, a checkpoint every 2 to 5 versions; in every other
   scenario with ``changes.prior.rows``, so compactions store prior rows, and in half of those set to
   ``lookup``, so clusterings look them up too);
2. at once, in separate processes (:mod:`model_worker`): writers doing upserts, deletes, mixed
   changes and overwrites; a maintainer clustering or compacting buckets (the local executor, then
   ``commit_rewrites``; compactions as one unit, in key ranges, or in key ranges that spill, into one or
   several BaseFiles per bucket); a reclaimer running reclamation (its expire commit, then the deletions) with its
   clock up to 90 minutes ahead (so that versions expire), pinning recent versions, and PURGE; every
   process on a storage that fails (before or after applying), stalls and loses answers at random, with
   its own seed;
3. the history is rebuilt from the journals: the commit standing at each version is the one that was
   created there first and not taken back as published into removed history;
4. checked: every acknowledged commit is the one at its version; no commit reported as not landed (a
   ``CommitError`` other than ``CommitStateUnknownError``, or any error of a writer) is anywhere in the
   history; every commit in the history is one
   some process made; every version that must be retained reads exactly as the model of the rows says
   (replaying the data operations of the history in version order), acknowledged pins' versions too; the
   change feed between random retained versions equals the model's difference of their rows; then, with
   the writers gone, a reclamation with no grace leaves exactly the data files the retained
   versions read, and the pinned versions still read.

``run(n, seed)`` returns the counts that ``scripts/model_check.py`` prints.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest.mock import patch

import numpy as np

from maintd import Table, VersionNotFoundError
from maintd.reclaim import reclaim_table
from maintd.storage.faulty import Fault, FaultPlan
from maintd.table.actions import AddFile, RemoveFile
from maintd.table.priors import GroupPriors
from maintd.table.reader import read_snapshot

WORKER = Path(__file__).with_name("model_worker.py")
WRITERS = 3
WRITES = ("upsert", "delete", "changes", "overwrite")
"""Operations after whose commit nothing can raise: any error they raise means they did not land."""
SCENARIO_TIMEOUT = 300.0
FEEDS = 8
"""Change feeds checked per scenario, between random retained versions."""
Key = tuple[str, int]


@dataclass
class Result:
    """What a run of scenarios checked and found."""

    scenarios: int = 0
    versions: int = 0
    mismatches: list[str] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)

    def line(self) -> str:
        return f"{self.scenarios} scenarios, {self.versions} versions checked, {len(self.mismatches)} mismatches"


class Workers:
    """Long-lived worker processes, one per role, answering one command per line."""

    def __init__(self, writers: int = WRITERS, env: dict[str, str] | None = None) -> None:
        self.extra_env = dict(env or {})
        self.names = [f"writer-{i}" for i in range(writers)] + ["maintainer", "reclaimer"]
        self.procs: dict[str, subprocess.Popen[str]] = {}
        for name in self.names:
            self._spawn(name)

    def _spawn(self, name: str) -> None:
        env = dict(os.environ, **self.extra_env, PYTHONPATH=os.pathsep.join(filter(None, [str(WORKER.parent),
                                                                        os.environ.get("PYTHONPATH")])))
        self.procs[name] = subprocess.Popen([sys.executable, str(WORKER)], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, text=True, env=env, bufsize=1)

    def run(self, commands: dict[str, dict[str, Any]], timeout: float) -> dict[str, dict[str, Any]]:
        """Send every command at once and wait for every answer (a dead or stuck worker is replaced)."""
        for name, cmd in commands.items():
            proc = self.procs[name]
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(cmd) + "\n")
            proc.stdin.flush()
        answers: dict[str, dict[str, Any]] = {}
        deadline = time.monotonic() + timeout
        for name in commands:
            answers[name] = self._answer(name, deadline)
        return answers

    def _answer(self, name: str, deadline: float) -> dict[str, Any]:
        proc = self.procs[name]
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        line = proc.stdout.readline() if ready else ""
        if line:
            return dict(json.loads(line))
        proc.kill()
        proc.wait()
        self._spawn(name)
        return {"ok": False, "error": f"worker {name} {'died' if ready else 'timed out'}"}

    def close(self) -> None:
        for proc in self.procs.values():
            try:
                assert proc.stdin is not None
                proc.stdin.write(json.dumps({"cmd": "exit"}) + "\n")
                proc.stdin.close()
                proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()


def faults(rng: np.random.Generator) -> str:
    """A random fault plan for one process: failures, ambiguous publishes, lost deletes, stalls; sometimes a
    storage whose reads of the log fail so often that whether a commit landed cannot always be told."""
    fail = float(rng.choice([0.0, 0.005, 0.02]))
    stormy = [Fault("fail", op="read", path="_log/*.json", probability=0.4),
              Fault("fail", op="exists", path="_log/*", probability=0.2)] if rng.random() < 0.2 else []
    rules = [*stormy,
        Fault("fail", op="*", probability=fail),
        Fault("fail_after", op="put_if_absent", path="_log/*.json", probability=float(rng.choice([0.05, 0.15]))),
        Fault("fail", op="put_if_absent", path="_log/*.json", probability=0.03),
        Fault("fail_after", op="put_if_absent", path="_log/*.checkpoint.parquet", probability=0.1),
        Fault("fail_after", op="delete", probability=0.05),
        Fault("fail_after", op="write_atomic", probability=0.05),
        Fault("delay", op="*", probability=0.03, seconds=0.02),
        Fault("delay", op="put_if_absent", path="_log/*.json", probability=0.15, seconds=0.25),
    ]
    return FaultPlan(rules, seed=int(rng.integers(2**31))).to_json()


PRIOR_ROWS = ("false", "true", "false", "lookup")
"""``changes.prior.rows`` by seed: half the scenarios store prior rows, half of those look them up when
clustering too."""


def scenario(workers: Workers, root: Path, seed: int, uri: str | None = None) -> tuple[int, list[str], dict[str, int]]:
    """Run and check one scenario (the table at ``uri``, by default below ``root``; journals in ``root``);
    returns (versions checked, mismatches, statistics)."""
    rng = np.random.default_rng(seed)
    uri = uri or str(root / "t")
    retain = int(rng.choice([0, 0, 1]))
    table = Table.create(uri, "id:int64!,name:string,ds:string", primary_key="id", partition_by="ds", buckets=2,
                         properties={"acid.data.retain.hours": retain,
                                     "log.checkpoint.interval": int(rng.choice([2, 3, 5])),
                                     "changes.prior.rows": PRIOR_ROWS[seed % 4]})
    created0 = table.log.read_commit_txn(0)
    commands: dict[str, dict[str, Any]] = {}
    for i, name in enumerate(workers.names):
        cmd: dict[str, Any] = {"uri": uri, "journal": str(root / f"{name}.jsonl"), "seed": int(rng.integers(2**31)),
                               "faults": faults(rng), "blackout": float(rng.choice([0.0, 0.0, 0.1]))}
        if name.startswith("writer"):
            cmd |= {"role": "writer", "ops": int(rng.integers(4, 11)), "offset": i}
        elif name == "maintainer":
            # in tables with prior rows, more rounds: a compaction after a compaction stores them
            cmd |= {"role": "maintainer", "rounds": int(rng.integers(3, 7) if seed % 2 else rng.integers(1, 4))}
            if PRIOR_ROWS[seed % 4] == "lookup":  # clusterings look up: more of them, between fewer compactions
                cmd |= {"rounds": int(rng.integers(5, 9)), "cluster_share": 0.75}
        else:
            cmd |= {"role": "reclaimer", "rounds": int(rng.integers(2, 7))}
        commands[name] = cmd
    answers = workers.run(commands, SCENARIO_TIMEOUT)
    mismatches = [f"seed {seed}: {name} failed: {a.get('error')}" for name, a in answers.items() if not a.get("ok")]
    journal = [json.loads(line) for name in workers.names if (root / f"{name}.jsonl").exists()
               for line in (root / f"{name}.jsonl").read_text().splitlines()]
    checker = Checker(uri, seed, journal, created0)
    checker.check()
    return checker.versions, mismatches + checker.mismatches, checker.stats()


class Checker:
    """Rebuilds the history from the journals and checks the table against it."""

    def __init__(self, uri: str, seed: int, journal: list[dict[str, Any]], created0: str | None) -> None:
        self.uri, self.seed = uri, seed
        self.journal = journal
        self.mismatches: list[str] = []
        self.versions = 0
        self.feeds = 0
        self.feeds_from_prior_rows = 0
        self.feeds_with_changed_rows_from_prior_rows = 0
        self.prior_files = 0
        self.looked_up_files = 0
        self.ops = [r for r in journal if r["type"] == "op"]
        created: dict[int, list[tuple[int, str]]] = {0: [(0, created0 or "")]}
        for r in journal:
            if r["type"] == "created":
                created.setdefault(r["version"], []).append((r["t"], r["txn"]))
        ghosts = {(r["version"], r["txn"]) for r in journal if r["type"] == "ghost"}
        self.history: dict[int, str] = {}
        for v, made in created.items():
            standing = sorted((t, txn) for t, txn in made if (v, txn) not in ghosts)
            if standing:
                self.history[v] = standing[0][1]

    def fail(self, what: str) -> None:
        self.mismatches.append(f"seed {self.seed}: {what}")

    def stats(self) -> dict[str, int]:
        outcomes = [r["outcome"] for r in self.ops]
        return {"acked": outcomes.count("acked"), "unknown": outcomes.count("unknown"),
                "not_landed": outcomes.count("not_landed"), "error": outcomes.count("error"),
                "ghosts": sum(1 for r in self.journal if r["type"] == "ghost"),
                "purges": sum(1 for r in self.ops if r["kind"] == "purge" and r["outcome"] == "acked"),
                "pins": len(self._pinned()),
                "expires": sum(1 for r in self.ops if r["kind"] == "expire" and r.get("version") is not None),
                "feeds": self.feeds, "feeds_from_prior_rows": self.feeds_from_prior_rows,
                "feeds_with_changed_rows_from_prior_rows": self.feeds_with_changed_rows_from_prior_rows,
                "prior_files": self.prior_files, "looked_up_files": self.looked_up_files}

    def check(self) -> None:
        table = Table.open(self.uri)
        latest = table.version
        self._check_promises(latest)
        states = self._model(latest)
        oldest = self._check_reads(table, latest, states, count=True)
        self._check_feeds(table, oldest, latest, states)
        required = self._required_oldest()
        if oldest > required:
            self.fail(f"versions {required}..{oldest - 1} must be retained but cannot be read")
        self._check_final_reclamation(states)

    def _check_promises(self, latest: int) -> None:
        missing = [v for v in range(latest + 1) if v not in self.history]
        if missing:
            self.fail(f"no commit is known to stand at version(s) {missing}")
        where = {txn: v for v, txn in self.history.items()}
        for op in self.ops:
            txns = op["txns"]
            if op["outcome"] == "acked" and op.get("version") is None:  # a pin, or an expire with nothing to do
                if txns and txns[-1] not in where:
                    self.fail(f"{op['kind']} acknowledged is nowhere in the history ({txns[-1]})")
                txns = txns[:-1]
            elif op["outcome"] == "acked":
                if not txns or self.history.get(op["version"]) != txns[-1]:
                    self.fail(f"{op['kind']} acknowledged at version {op['version']} is not the commit standing "
                              f"there ({self.history.get(op['version'])} vs {txns[-1:]})")
                txns = txns[:-1]
            elif op["outcome"] == "unknown" or (op["outcome"] == "error" and op["kind"] not in WRITES):
                continue
            for txn in txns:
                if txn in where:
                    self.fail(f"{op['kind']} reported as not landed ({op.get('error')}) stands at version {where[txn]}")
        known = {txn for op in self.ops for txn in op["txns"]} | {self.history.get(0)}
        for v, txn in self.history.items():
            if txn not in known:
                self.fail(f"version {v} holds transaction {txn}, which no process made")

    def _model(self, latest: int) -> dict[int, dict[Key, dict[str, Any]]]:
        """The rows of every version: the data operations of the history applied in version order."""
        by_txn = {op["txns"][-1]: op for op in self.ops if op["txns"]}
        rows: dict[Key, dict[str, Any]] = {}
        states: dict[int, dict[Key, dict[str, Any]]] = {}
        for v in range(latest + 1):
            op = by_txn.get(self.history.get(v, ""))
            if op is not None:
                apply(rows, op)
            states[v] = dict(rows)
        return states

    def _check_reads(self, table: Table, latest: int, states: dict[int, dict[Key, dict[str, Any]]], *,
                     count: bool) -> int:
        """Compare every version that can be read with the model; returns the oldest that can."""
        v = latest
        while v >= 0:
            try:
                got = read_snapshot(table.storage, table.snapshot(v)).to_pylist()
            except VersionNotFoundError:
                break
            except Exception as exc:
                self.fail(f"version {v} cannot be read: {type(exc).__name__}: {exc}")
                break
            found = {(r["ds"], r["id"]): r for r in got}
            if len(found) != len(got) or found != states[v]:
                self.fail(f"version {v} reads {len(got)} rows that differ from the model's {len(states[v])}: "
                          f"{_diff(found, states[v])}")
            if count:
                self.versions += 1
            v -= 1
        return v + 1

    def _check_feeds(self, table: Table, oldest: int, latest: int, states: dict[int, dict[Key, dict[str, Any]]]
                     ) -> None:
        """The change feed between random retained versions against the model's difference of their rows (in
        tables with prior rows too, whose feeds read what compactions stored)."""
        self.prior_files = len(table.snapshot().priors)
        self.looked_up_files = sum(p.lookup for p in table.snapshot().priors.values())
        rng = np.random.default_rng(self.seed)
        # every readable version is checked, as the reads are: the retention check (the clock's, which the
        # reclaimer ran ahead of) is tested elsewhere
        table.resolve_version = lambda version=None, as_of=None, **_: latest if version is None else version
        record, changed_rows, used, held = GroupPriors.record, GroupPriors.changed_rows, [], []

        def counted(self: GroupPriors, *args: Any) -> Any:
            found = record(self, *args)
            used.append(found is not None or bool(self.usable(args[1]) or self.usable(args[2])))
            return found

        def counted_rows(self: GroupPriors, *args: Any) -> Any:
            found = changed_rows(self, *args)
            held.append(found is not None)
            return found

        for _ in range(FEEDS if latest > oldest else 0):
            a = int(rng.integers(oldest, latest))
            b = int(rng.integers(a + 1, latest + 1))
            used.clear()
            held.clear()
            try:
                with patch.object(GroupPriors, "record", counted), patch.object(GroupPriors, "changed_rows",
                                                                               counted_rows):
                    got = {(r["ds"], r["id"]): (r["_change"], r["name"]) for r in table.changes(a, b).to_pylist()}
            except Exception as exc:
                self.fail(f"changes({a}, {b}) failed: {type(exc).__name__}: {exc}")
                return
            want = model_changes(states[a], states[b])
            if got != want:
                self.fail(f"changes({a}, {b}) differ from the model: {_diff(got, want)}")
            self.feeds += 1
            self.feeds_from_prior_rows += any(used)
            self.feeds_with_changed_rows_from_prior_rows += any(held)

    def _required_oldest(self) -> int:
        """Every version from the newest oldest-retained version a reclamation planned (or a PURGE commit) on
        must read: nothing else may have removed history."""
        marks = [r["oldest_retained"] for r in self.journal if r["type"] == "reclaim" and "oldest_retained" in r]
        purges = {op["txns"][-1] for op in self.ops if op["kind"] == "purge" and op["txns"]}
        marks += [v for v, txn in self.history.items() if txn in purges]
        required = max(marks, default=0)
        # An acknowledged pin keeps its version, and every later one, for its TTL (longer than the scenario).
        return min([required, *self._pinned()])

    def _pinned(self) -> list[int]:
        return [op["pinned"] for op in self.ops if op["kind"] == "pin" and op["outcome"] == "acked"]

    def _check_final_reclamation(self, states: dict[int, dict[Key, dict[str, Any]]]) -> None:
        """No writer left: a reclamation without grace leaves exactly the files the retained versions read (and
        the prior-rows files of those that are BaseFiles)."""
        table = Table.open(self.uri)
        try:
            reclaim_table(table, now=datetime.now(UTC) + timedelta(minutes=1), orphan_grace=timedelta(0),
                          force_short_grace=True)
        except Exception as exc:
            self.fail(f"the final reclamation failed: {type(exc).__name__}: {exc}")
            return
        table = Table.open(self.uri)
        for v in range(max(states) + 1, table.version + 1):  # the reclamation's expire record changes no row
            record = table.log.read_commit(v) or []
            if any(isinstance(a, AddFile | RemoveFile) for a in record):
                self.fail(f"the final reclamation committed files at version {v}")
            states[v] = states[v - 1]
        oldest = self._check_reads(table, table.version, states, count=False)
        if self._pinned() and oldest > min(self._pinned()):
            self.fail(f"the final reclamation expired pinned version(s) {sorted(set(self._pinned()))}: the oldest "
                      f"readable version is {oldest}")
        needed = set().union(*(table.snapshot(v).files for v in range(oldest, table.version + 1)))
        # a prior-rows file goes with its BaseFiles: kept exactly while they are
        needed |= {p.path for p in table.snapshot().priors.values() if set(p.of) & needed}
        on_disk = {f.path for f in table.storage.walk() if not f.path.startswith("_log/")}
        if on_disk != needed:
            self.fail(f"after the final reclamation, files not needed: {sorted(on_disk - needed)[:3]}, "
                      f"files needed but missing: {sorted(needed - on_disk)[:3]}")


def apply(rows: dict[Key, dict[str, Any]], op: dict[str, Any]) -> None:
    """One data operation on the model (maintenance and PURGE change no rows)."""
    kind = op["kind"]
    if kind == "upsert":
        for r in op["rows"]:
            rows[(r["ds"], r["id"])] = dict(r)
    elif kind == "delete":
        for r in op["rows"]:
            rows.pop((r["ds"], r["id"]), None)
    elif kind == "changes":
        for r in op["rows"]:
            key = (r["ds"], r["id"])
            if r["op"] == 1:
                rows.pop(key, None)
            else:
                rows[key] = {"id": r["id"], "name": r["name"], "ds": r["ds"]}
    elif kind == "overwrite":
        spec = op.get("partition")
        for key in [k for k in rows if spec is None or k[0] == spec["ds"]]:
            del rows[key]
        for r in op["rows"]:
            rows[(r["ds"], r["id"])] = dict(r)


def model_changes(a: dict[Key, dict[str, Any]], b: dict[Key, dict[str, Any]]) -> dict[Key, tuple[str, Any]]:
    """The net changes from rows ``a`` to rows ``b``: key -> (kind, the name after, or before a delete)."""
    out: dict[Key, tuple[str, Any]] = {}
    for k in a.keys() | b.keys():
        if k not in a:
            out[k] = ("insert", b[k]["name"])
        elif k not in b:
            out[k] = ("delete", a[k]["name"])
        elif a[k]["name"] != b[k]["name"]:
            out[k] = ("update", b[k]["name"])
    return out


def _diff(got: dict[Key, Any], want: dict[Key, Any]) -> str:
    extra = sorted(set(got) - set(want))[:3]
    lost = sorted(set(want) - set(got))[:3]
    changed = sorted(k for k in set(got) & set(want) if got[k] != want[k])[:3]
    return f"unexpected {extra}, missing {lost}, changed {changed}"


def run(n: int, seed: int, base: Path, *, progress: Callable[[Result], None] | None = None,
        table_base: str | None = None, env: dict[str, str] | None = None, writers: int = WRITERS) -> Result:
    """Run ``n`` scenarios with seeds derived from ``seed``; each local table is deleted once checked.

    ``table_base``: put the tables there instead (``s3://bucket``), the workers' environment extended by ``env``.
    """
    result = Result()
    workers = Workers(writers, env)
    try:
        for i in range(n):
            root = base / f"scenario-{seed}-{i}"
            root.mkdir(parents=True, exist_ok=True)
            uri = f"{table_base.rstrip('/')}/scenario-{seed}-{i}/t" if table_base else None
            versions, mismatches, stats = scenario(workers, root, seed * 1_000_003 + i, uri)
            result.scenarios += 1
            result.versions += versions
            result.mismatches += mismatches
            for k, value in stats.items():
                result.stats[k] = result.stats.get(k, 0) + value
            if not mismatches:
                shutil.rmtree(root, ignore_errors=True)
            if progress is not None:
                progress(result)
    finally:
        workers.close()
    return result
