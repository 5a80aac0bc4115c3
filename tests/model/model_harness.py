"""The model check: random scenarios of writer processes, maintenance and reclamation on failing storage,
every retained version checked against a model of the rows, and the two promises of the log checked.

One scenario (seeded):

1. the table's shape drawn (:func:`shapes.random_shape`: a primary key of 1 to 3 columns of any key type,
   including partition columns or not, in any order; 0 to 2 partition columns of string, integer or date type;
   narrow or wide schemas with nullable value columns holding nulls and text columns of few values; 1 to 16
   buckets; ``changes.prior.rows`` false, true or lookup), then its retention (0 or 1 hour) and a checkpoint
   every 2 to 5 versions; in a share of scenarios (``model_ops.EVOLUTION_SHARE``) a schema change: one writer
   adds 1 or 2 nullable value columns midway (``Table.add_columns``, or its write with ``merge_schema``) and
   writes values into them from then on, while the other writers keep writing rows without them; in a share
   (``model_ops.FEATURES_SHARE``, drawn apart as well) named table features: the table is created on them, or
   one writer moves it there midway (``Table.upgrade_protocol``) while the others write, each with some
   features asked for; the
   maintenance engine drawn (in process, or forced onto Spark in a share of
   ``SPARK_SHARE``) and the process model of the writers and the reclaimer (``spawn``: processes of their own;
   ``thread``: threads of one process; ``fork``: children forked from a process that used the table's storage);
2. at once (:mod:`model_worker`): writers doing upserts, deletes, mixed changes and overwrites of rows of
   the shape (:mod:`model_ops`); a maintainer running maintd's own maintenance (the planner with a policy
   that clusters or compacts, then execution and the commit as ``maintd run`` does them: in worker processes
   or threads, whole units, in key ranges, or in key ranges that spill, into one or several BaseFiles per
   bucket, or as Spark jobs); a reclaimer running reclamation (its expire commit, then the deletions) with its
   clock up to 90 minutes ahead (so that versions expire), pinning recent versions, and PURGE; every
   process on a storage that fails (before or after applying), stalls and loses answers at random, with
   its own seed;
3. the history is rebuilt from the journals: the commit standing at each version is the one that was
   created there first and not taken back as published into removed history;
4. checked: every acknowledged commit is the one at its version; no commit reported as not landed (a
   ``CommitError`` other than ``CommitStateUnknownError``, or any error of a writer) is anywhere in the
   history; every commit in the history is one
   some process made; every version that must be retained reads exactly as the oracle of the shape says
   (:class:`shapes.Oracle`, replaying the data operations of the history in version order), acknowledged
   pins' versions too; the change feed between random retained versions equals the oracle's net change
   (whole rows); with a schema change, that the versions before it read (and hold in their metadata) the
   columns as created, at the protocol they had, and the versions from it the new columns too (nulls in the
   rows written without them, upserts by writers that do not know them included) with feature ``addedColumns``, and that
   every file maintenance committed after it holds them (an ``add_columns`` whose outcome is unknown is
   taken as the history says it went); that every version's protocol is the one the history implies (legacy:
   2, 4 or 5 by the prior-rows property, 3 from the first pin, 6 from the schema change; on named features: the
   features asked, those the legacy version implied before an upgrade, and each further one from the version
   that first needed it, nothing more); then, with
   the writers gone, a reclamation with no grace leaves exactly the data files the retained
   versions read, and the pinned versions still read.

``run(n, seed)`` returns the counts that ``scripts/model_check.py`` prints, the shapes, engines and process
models drawn among them (how many scenarios had partition columns in the key, each key type, ...).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest.mock import patch

import numpy as np
from model_ops import (
    EVOLUTION_SHARE,
    FEATURES_SHARE,
    Draw,
    Evolution,
    Features,
    added_by,
    apply,
    draw,
    draw_evolution,
    draw_features,
    shape_stats,
)
from shapes import Oracle

from maintd import Table, VersionNotFoundError
from maintd.reclaim import reclaim_table
from maintd.storage.faulty import Fault, FaultPlan
from maintd.table.log import features as table_features
from maintd.table.log.actions import AddFile, Protocol, RemoveFile
from maintd.table.read.feed import GroupPriors
from maintd.table.read.reader import read_snapshot

WORKER = Path(__file__).with_name("model_worker.py")
WRITERS = 3
WRITES = ("upsert", "delete", "changes", "overwrite", "add_columns", "upgrade_protocol")
"""Operations after whose commit nothing can raise: any error they raise means they did not land."""
SCENARIO_TIMEOUT = 300.0
FEEDS = 8
"""Change feeds checked per scenario, between random retained versions."""


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
    """Long-lived worker processes answering one command per line: one per role (the maintainer always; the
    writers and the reclaimer in the ``spawn`` process model), and a host whose threads or forked children run
    the writers and the reclaimer in the ``thread`` and ``fork`` process models."""

    def __init__(self, writers: int = WRITERS, env: dict[str, str] | None = None) -> None:
        self.extra_env = dict(env or {})
        self.names = [f"writer-{i}" for i in range(writers)] + ["maintainer", "reclaimer"]
        self.procs: dict[str, subprocess.Popen[str]] = {}
        for name in [*self.names, "host"]:
            self._spawn(name)

    def _spawn(self, name: str) -> None:
        path = [str(WORKER.parent), str(WORKER.parent.parent), os.environ.get("PYTHONPATH")]
        env = dict(os.environ, **self.extra_env, PYTHONPATH=os.pathsep.join(filter(None, path)))
        self.procs[name] = subprocess.Popen([sys.executable, str(WORKER)], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, text=True, env=env, bufsize=1)

    def run(self, commands: dict[str, dict[str, Any]], timeout: float, model: str = "spawn"
            ) -> dict[str, dict[str, Any]]:
        """Send every command at once and wait for every answer (a dead or stuck worker is replaced)."""
        hosted = {n: c for n, c in commands.items() if n != "maintainer"} if model != "spawn" else {}
        sent = {n: c for n, c in commands.items() if n not in hosted}
        if hosted:
            sent["host"] = {"cmd": "threads" if model == "thread" else "fork", "roles": hosted, "timeout": timeout}
        for name, cmd in sent.items():
            proc = self.procs[name]
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(cmd) + "\n")
            proc.stdin.flush()
        answers: dict[str, dict[str, Any]] = {}
        deadline = time.monotonic() + timeout
        for name in sent:
            got = self._answer(name, deadline + (10 if name == "host" else 0))
            if name != "host":
                answers[name] = got
            else:
                answers |= got.get("roles") or {n: got for n in hosted}
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


SPARK_SHARE = 0.06
"""The share of scenarios whose maintenance is forced onto Spark (a local session in the maintainer process):
a Spark job costs a second or more where the same work in process costs milliseconds."""


def scenario(workers: Workers, root: Path, seed: int, uri: str | None = None, spark_share: float = SPARK_SHARE,
             process_model: str | None = None, evolution_share: float = EVOLUTION_SHARE,
             features_share: float = FEATURES_SHARE) -> tuple[int, list[str], dict[str, int]]:
    """Run and check one scenario (the table at ``uri``, by default below ``root``; journals in ``root``);
    returns (versions checked, mismatches, statistics). The shape, the engine, the process model, the
    schema change (in a share ``evolution_share``) and the table features (in a share ``features_share``) are
    drawn from ``seed`` (the process model is ``process_model`` when given)."""
    rng = np.random.default_rng(seed)
    drawn = draw(rng, spark_share)
    if process_model is not None:
        drawn = replace(drawn, process_model=process_model)
    evolution = draw_evolution(seed, len([n for n in workers.names if n.startswith("writer")]), evolution_share)
    named = draw_features(seed, len([n for n in workers.names if n.startswith("writer")]), features_share)
    shape = drawn.shape
    uri = uri or str(root / "t")
    retain = int(rng.choice([0, 0, 1]))
    shape.create(uri, features=named.asked if named is not None and named.mode == "create" else None,
                 **{"acid.data.retain.hours": retain, "log.checkpoint.interval": int(rng.choice([2, 3, 5]))})
    created0 = Table.open(uri).log.read_commit_txn(0)
    commands: dict[str, dict[str, Any]] = {}
    for i, name in enumerate(workers.names):
        cmd: dict[str, Any] = {"uri": uri, "journal": str(root / f"{name}.jsonl"), "seed": int(rng.integers(2**31)),
                               "faults": faults(rng), "blackout": float(rng.choice([0.0, 0.0, 0.1])),
                               "shape": drawn.shape_seed}
        if name.startswith("writer"):
            cmd |= {"role": "writer", "ops": int(rng.integers(4, 11)), "offset": i}
            if evolution is not None and evolution.writer == i:
                cmd["evolve"] = evolution.command()
            if named is not None and named.mode == "upgrade" and named.writer == i:
                cmd["upgrade"] = named.command()
        elif name == "maintainer":
            # in tables with prior rows, more rounds: a compaction after a compaction stores them
            cmd |= {"role": "maintainer", "engine": drawn.engine,
                    "rounds": int(rng.integers(3, 7) if shape.prior_rows != "false" else rng.integers(1, 4))}
            if shape.prior_rows == "lookup":  # clusterings look up: more of them, between fewer compactions
                cmd |= {"rounds": int(rng.integers(5, 9)), "cluster_share": 0.75}
            if evolution is not None:  # rounds after the change too: maintenance must carry the new columns
                cmd["rounds"] += 4
        else:
            cmd |= {"role": "reclaimer", "rounds": int(rng.integers(2, 7))}
        commands[name] = cmd
    answers = workers.run(commands, SCENARIO_TIMEOUT, drawn.process_model)
    mismatches = [f"seed {seed} ({shape.describe()}, {drawn.engine}, {drawn.process_model}): {name} failed: "
                  f"{a.get('error')}" for name, a in answers.items() if not a.get("ok")]
    journal = [json.loads(line) for name in workers.names if (root / f"{name}.jsonl").exists()
               for line in (root / f"{name}.jsonl").read_text().splitlines()]
    checker = Checker(uri, seed, journal, created0, drawn, evolution, named)
    checker.check()
    return checker.versions, mismatches + checker.mismatches, checker.stats() | shape_stats(drawn)


class Checker:
    """Rebuilds the history from the journals and checks the table against it."""

    def __init__(self, uri: str, seed: int, journal: list[dict[str, Any]], created0: str | None, drawn: Draw,
                 evolution: Evolution | None = None, named: Features | None = None) -> None:
        self.uri, self.seed = uri, seed
        self.drawn, self.shape = drawn, drawn.shape
        self.evolution = evolution
        self.named = named
        self.protocols_checked = 0
        self.pinned_at: int | None = None
        """The first version a pin's commit stands at (by the history), if one does."""
        self.upgraded_at: int | None = None
        """The version the upgrade to named features stands at (by the history), if it landed."""
        self.changed_at: int | None = None
        """The version whose commit added the columns (by the history), if one did."""
        self.evolved = {"versions checked after a schema change": 0, "feeds across a schema change": 0,
                        "maintenance outputs checked for added columns": 0,
                        "BaseFiles checked for added columns": 0}
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
        self.mismatches.append(f"seed {self.seed} ({self.shape.describe()}, maintenance {self.drawn.engine}, "
                               f"{self.drawn.process_model}): {what}")

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
                "prior_files": self.prior_files, "looked_up_files": self.looked_up_files,
                "maintenance planned": sum(1 for r in self.journal if r["type"] == "planned" and r["tasks"]),
                "maintenance planned nothing": sum(1 for r in self.journal if r["type"] == "planned"
                                                   and not r["tasks"]),
                "maintenance": sum(1 for r in self.ops if r["kind"] == "maintenance" and r["outcome"] == "acked"),
                f"maintenance on {self.drawn.engine}": sum(1 for r in self.ops if r["kind"] == "maintenance"
                                                           and r["outcome"] == "acked"),
                "maintenance tasks": sum(r.get("tasks", 0) for r in self.ops
                                         if r["kind"] == "maintenance" and r["outcome"] == "acked"),
                "protocols checked": self.protocols_checked,
                } | self._evolution_stats() | self._features_stats()

    def _features_stats(self) -> dict[str, int]:
        if self.named is None:
            return {}
        out = {"table features": 1, f"table features by {self.named.mode}": 1,
               f"table features asked: {len(self.named.asked)}": 1}
        if self.named.mode == "upgrade":
            out["table features upgrades that landed"] = int(self.upgraded_at is not None)
        table = Table.open(self.uri)
        for name in sorted(table_features.features_of(table.snapshot().protocol)):
            out[f"table feature {name} at the end"] = 1
        return out

    def _evolution_stats(self) -> dict[str, int]:
        if self.evolution is None:
            return {}
        where = {txn for txn in self.history.values()}
        standing = [op for op in self.ops if op["txns"] and op["txns"][-1] in where]
        unknown = [op for op in self.ops if op["outcome"] == "unknown" and op["txns"]
                   and (op["kind"] == "add_columns" or op.get("rec", {}).get("merge"))]
        return {"schema evolution": 1, f"schema evolution by {self.evolution.mode}": 1,
                f"schema evolution of {len(self.evolution.columns)} column(s)": 1,
                "schema changed": int(self.changed_at is not None),
                "schema changes of unknown outcome": len(unknown),
                "schema changes of unknown outcome that landed": sum(op["txns"][-1] in where for op in unknown),
                "writes with added columns in the history": sum(op["kind"] != "add_columns" and "cols" in op["rec"]
                                                                for op in standing if "rec" in op),
                } | self.evolved

    def check(self) -> None:
        for r in self.journal:
            if r["type"] == "wrong engine":
                self.fail(f"maintenance drawn to run {r['drawn']} ran {r['ran']}")
        table = Table.open(self.uri)
        latest = table.version
        self._check_promises(latest)
        self.pinned_at, self.upgraded_at = self._landed_at("pin"), self._landed_at("upgrade_protocol")
        oracle = self._model(latest)
        oldest = self._check_reads(table, latest, oracle, count=True)
        self._check_feeds(table, oldest, latest, oracle)
        self._check_maintenance_outputs(oracle)
        required = self._required_oldest()
        if oldest > required:
            self.fail(f"versions {required}..{oldest - 1} must be retained but cannot be read")
        self._check_final_reclamation(oracle)

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

    def _model(self, latest: int) -> Oracle:
        """The rows of every version: the data operations of the history applied in version order."""
        by_txn = {op["txns"][-1]: op for op in self.ops if op["txns"]}
        oracle = Oracle(self.shape)
        for v in range(latest + 1):
            op = by_txn.get(self.history.get(v, ""))
            rec = op.get("rec") if op is not None else None
            if added_by(oracle, rec) and self.changed_at is None:
                self.changed_at = v
            if rec is not None and rec["kind"] != "add_columns" and not rec.get("merge"):
                missing = [n for n, _ in rec.get("cols", []) if n not in oracle.names]
                if missing:
                    self.fail(f"version {v}: a write with values for columns {missing} landed before they existed")
            apply(self.shape, oracle, v, rec)
        return oracle

    def _check_reads(self, table: Table, latest: int, oracle: Oracle, *, count: bool) -> int:
        """Compare every version that can be read with the model; returns the oldest that can."""
        v = latest
        while v >= 0:
            try:
                snap = table.snapshot(v)
                got = read_snapshot(table.storage, snap)
            except VersionNotFoundError:
                break
            except Exception as exc:
                self.fail(f"version {v} cannot be read: {type(exc).__name__}: {exc}")
                break
            problem = oracle.mismatch(v, got.to_pylist(), got.column_names)
            if problem is not None:
                self.fail(problem)
            self._check_schema(v, snap.metadata.column_names, snap.protocol, oracle)
            if count:
                self.versions += 1
                self.evolved["versions checked after a schema change"] += self._after_change(v)
            v -= 1
        return v + 1

    def _after_change(self, v: int) -> bool:
        return self.changed_at is not None and v >= self.changed_at

    def _check_schema(self, v: int, columns: Sequence[str], protocol: Protocol, oracle: Oracle) -> None:
        """The schema a version's metadata names is the oracle's, and its protocol the one the history implies
        (:meth:`_expected_protocol`): feature ``addedColumns`` from the first change on, and not before it unless
        the table asked for it."""
        if tuple(columns) != oracle.columns(v):
            self.fail(f"version {v}: the metadata names columns {list(columns)}, expected {list(oracle.columns(v))}")
        expected = self._expected_protocol(v)
        self.protocols_checked += 1
        if protocol != expected:
            self.fail(f"version {v}: protocol {protocol}, expected {expected} (schema change at {self.changed_at}, "
                      f"first pin at {self.pinned_at}, upgrade to named features at {self.upgraded_at})")

    def _landed_at(self, kind: str) -> int | None:
        """The first version at which a commit of an operation of ``kind`` stands, by the history."""
        where = {txn: v for v, txn in self.history.items()}
        return min((where[t] for op in self.ops if op["kind"] == kind for t in op["txns"] if t in where), default=None)

    def _expected_protocol(self, v: int) -> Protocol:
        """The protocol version ``v`` must have: a legacy table is created at 2 (4 with prior rows, 5 looked up),
        goes to 3 with its first pin and to 6 with its first added column; a table on named features (from create,
        or from the upgrade's version on) has the features asked, those the legacy version before the upgrade
        implied, and each feature from the version that first needed it: ``pins`` from the first pin,
        ``addedColumns`` from the schema change, the prior-rows ones from create (with what they depend on)."""
        def needs(at: int) -> set[str]:
            out = {"false": set(), "true": {table_features.PRIOR_ROWS},
                   "lookup": {table_features.LOOKED_UP_PRIOR_ROWS}}[self.shape.prior_rows]
            if self.pinned_at is not None and self.pinned_at <= at:
                out.add(table_features.PINS)
            if self.changed_at is not None and self.changed_at <= at:
                out.add(table_features.ADDED_COLUMNS)
            return out

        def legacy(at: int) -> int:
            base = {"false": 2, "true": 4, "lookup": 5}[self.shape.prior_rows]
            pinned = 3 if self.pinned_at is not None and self.pinned_at <= at else 2
            return max(base, pinned, 6 if self.changed_at is not None and self.changed_at <= at else 2)

        named_from = None if self.named is None else 0 if self.named.mode == "create" else self.upgraded_at
        if named_from is None or v < named_from:
            return Protocol(min_reader_version=legacy(v), min_writer_version=legacy(v))
        assert self.named is not None
        kept = table_features.implied_by_legacy(legacy(named_from - 1)) if named_from > 0 else frozenset()
        return table_features.named({*self.named.asked, *kept, *needs(v)})

    def _check_maintenance_outputs(self, oracle: Oracle) -> None:
        """The files each acknowledged maintenance commit added (their columns journaled by the maintainer as
        soon as it landed) hold the added columns exactly when the version it stands at has them: maintenance
        writes its read version's schema, and one that read before the change cannot land after it."""
        added = set(oracle.names) - set(self.shape.schema.names)
        for r in self.journal:
            if r["type"] != "outputs" or not added:
                continue
            want = added if self._after_change(r["version"]) else set()
            for path, kind, names in r["files"]:
                if added & set(names) != want:
                    self.fail(f"version {r['version']}: maintenance output {path} ({kind}) has added columns "
                              f"{sorted(added & set(names))}, expected {sorted(want)} (the change is at "
                              f"{self.changed_at})")
                if want:
                    self.evolved["maintenance outputs checked for added columns"] += 1
                    self.evolved["BaseFiles checked for added columns"] += kind == "base"

    def _check_feeds(self, table: Table, oldest: int, latest: int, oracle: Oracle) -> None:
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
                    feed = table.changes(a, b)
            except Exception as exc:
                self.fail(f"changes({a}, {b}) failed: {type(exc).__name__}: {exc}")
                return
            problem = oracle.feed_mismatch(a, b, feed)
            if problem is not None:
                self.fail(problem)
            self.feeds += 1
            self.evolved["feeds across a schema change"] += self.changed_at is not None and a < self.changed_at <= b
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

    def _check_final_reclamation(self, oracle: Oracle) -> None:
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
        for v in range(max(oracle.versions) + 1, table.version + 1):  # the reclamation's expire record changes no row
            record = table.log.read_commit(v) or []
            if any(isinstance(a, AddFile | RemoveFile) for a in record):
                self.fail(f"the final reclamation committed files at version {v}")
            oracle.unchanged(v)
        oldest = self._check_reads(table, table.version, oracle, count=False)
        if self._pinned() and oldest > min(self._pinned()):
            self.fail(f"the final reclamation expired pinned version(s) {sorted(set(self._pinned()))}: the oldest "
                      f"readable version is {oldest}")
        needed = set().union(*(table.snapshot(v).files for v in range(oldest, table.version + 1)))
        # a prior-rows file goes with its BaseFiles (docs/format.md, "Prior rows"): kept while every one of them
        # is, since a looked-up one goes with the first of them that a commit removes (a compaction removes all
        # of its own file's at once)
        needed |= {p.path for p in table.snapshot().priors.values() if set(p.of) <= needed}
        on_disk = {f.path for f in table.storage.walk() if not f.path.startswith("_log/")}
        if on_disk != needed:
            self.fail(f"after the final reclamation, files not needed: {sorted(on_disk - needed)[:3]}, "
                      f"files needed but missing: {sorted(needed - on_disk)[:3]}")


def run(n: int, seed: int, base: Path, *, progress: Callable[[Result], None] | None = None,
        table_base: str | None = None, env: dict[str, str] | None = None, writers: int = WRITERS,
        spark_share: float = SPARK_SHARE, process_models: Sequence[str] | None = None,
        evolution_share: float = EVOLUTION_SHARE, features_share: float = FEATURES_SHARE) -> Result:
    """Run ``n`` scenarios with seeds derived from ``seed``; each local table is deleted once checked.

    ``table_base``: put the tables there instead (``s3://bucket``), the workers' environment extended by ``env``.
    ``spark_share``: the share of scenarios whose maintenance is forced onto Spark. ``process_models``: these
    process models in turn rather than one drawn (a short run then has each). ``evolution_share``: the share of
    scenarios in which a writer adds columns midway; ``features_share``: the share whose table is on named table
    features (created so, or upgraded midway by a writer).
    """
    result = Result()
    workers = Workers(writers, env)
    try:
        for i in range(n):
            root = base / f"scenario-{seed}-{i}"
            root.mkdir(parents=True, exist_ok=True)
            uri = f"{table_base.rstrip('/')}/scenario-{seed}-{i}/t" if table_base else None
            model = process_models[i % len(process_models)] if process_models else None
            versions, mismatches, stats = scenario(workers, root, seed * 1_000_003 + i, uri, spark_share, model,
                                                   evolution_share, features_share)
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
