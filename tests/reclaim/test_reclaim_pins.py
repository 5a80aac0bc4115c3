"""Reclamation honours pins: a pinned version survives retention 0 and PURGE, expires with its TTL, and races
reclamation in another process safely (the race forced at reclamation's named steps). Pins through the Table API,
in the format and in the pin conflict table are tested in tests/table/test_pins*.py."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from freezegun import freeze_time
from reclaim_helpers import T0, data_files_on_disk, rows
from typer.testing import CliRunner

from maintd import InvalidInputError, PinConflictError, Table, VersionNotFoundError
from maintd.cli import app
from maintd.reclaim import held_by_pins, plan_reclamation, purge_table, reclaim_table
from maintd.table.log.actions import EXPIRE_OPERATION

HOUR = timedelta(hours=1)


def overwritten_table(root: Path, retain_hours: int = 24) -> tuple[Table, dict[int, list[dict[str, object]]]]:
    """Versions 1-2 upsert, 3 overwrites the table (removing the files of 1 and 2), 4 upserts; the rows of each."""
    table = Table.create(str(root), "id:int64!,name:string", primary_key="id", buckets=2,
                         properties={"acid.data.retain.hours": retain_hours})
    seen = {}
    for v, batch in enumerate([{"id": [1, 2], "name": ["a", "b"]}, {"id": [3], "name": ["c"]}], 1):
        assert table.upsert(pa.table(batch)) == v
        seen[v] = rows(table.read())
    assert table.overwrite(pa.table({"id": [9], "name": ["z"]})) == 3
    assert table.upsert(pa.table({"id": [10], "name": ["y"]})) == 4
    seen[3], seen[4] = [{"id": 9, "name": "z"}], rows(table.read())
    return table, seen


def retain_nothing(table: Table) -> None:
    """``acid.data.retain.hours=0``: reclamation keeps the latest version only (and what pins hold)."""
    table.set_properties({"acid.data.retain.hours": 0})


def files_of(table: Table, version: int) -> set[str]:
    return set(table.snapshot(version).files)


def test_a_pinned_version_survives_retention_zero_and_reads_the_same(tmp_path: Path) -> None:
    table, seen = overwritten_table(tmp_path / "t")
    pin = table.pin(2, timedelta(hours=3), "a long query")
    needed = files_of(table, 2)
    retain_nothing(table)

    report = reclaim_table(Table.open(table.uri))

    assert report.oldest_retained_version == 2 and report.pinned_versions == (2,) and report.pinned_bytes > 0
    assert needed <= data_files_on_disk(tmp_path / "t")
    other = Table.open(table.uri)  # every instance sees the pin, from the log
    assert [p.id for p in other.pins()] == [pin.id]
    assert rows(other.read(version=2)) == seen[2]
    with pytest.raises(VersionNotFoundError, match="oldest retained version is 2"):
        other.read(version=1)

    other.unpin(pin.id)
    after = reclaim_table(Table.open(table.uri))
    assert after.data_bytes_deleted > 0 and not needed & data_files_on_disk(tmp_path / "t")
    with pytest.raises(VersionNotFoundError):
        Table.open(table.uri).read(version=2)
    assert rows(Table.open(table.uri).read()) == seen[4]


def test_a_pin_survives_log_expiry_through_checkpoints(tmp_path: Path) -> None:
    table, _ = overwritten_table(tmp_path / "t")
    for i in range(12):
        table.upsert(pa.table({"id": [100 + i], "name": ["w"]}))
    pin = table.pin(16, timedelta(hours=3))
    for i in range(12):  # past the checkpoint at 20: the pin is loaded from it, not from its commit
        table.upsert(pa.table({"id": [200 + i], "name": ["w"]}))
    retain_nothing(table)
    report = reclaim_table(Table.open(table.uri))
    assert report.oldest_retained_version == 16 and not table.log.commit_exists(15)
    reopened = Table.open(table.uri)
    assert reopened.snapshot().base_checkpoint >= 20 and reopened.pins() == [pin]
    assert reopened.snapshot(16).version == 16


def test_purge_refuses_a_pinned_version_unless_forced_and_records_the_unpin(tmp_path: Path) -> None:
    table, seen = overwritten_table(tmp_path / "t")
    pin = table.pin(2, timedelta(hours=3), "export")
    needed = files_of(table, 2)
    retain_nothing(table)
    with pytest.raises(InvalidInputError, match=r"PURGE would drop pinned version\(s\) 2 \(pin .*--force-unpin"):
        purge_table(Table.open(table.uri), user="ops@test")
    assert Table.open(table.uri).version == 6, "a refused PURGE commits nothing"
    assert rows(Table.open(table.uri).read(version=2)) == seen[2] and needed <= data_files_on_disk(tmp_path / "t")

    report = purge_table(Table.open(table.uri), user="ops@test", force_unpin=True)

    assert report.pins_removed == (pin.id,) and Table.open(table.uri).pins(include_expired=True) == []
    audit = Table.open(table.uri).history(limit=1)[0]
    assert audit.operation == "PURGE" and audit.parameters["pins_removed"] == [pin.id]
    assert not needed & data_files_on_disk(tmp_path / "t")


def test_a_pin_expires_with_its_ttl_and_is_removed_by_a_commit(tmp_path: Path) -> None:
    with freeze_time(T0):
        table, seen = overwritten_table(tmp_path / "t")
        pin = table.pin(2, timedelta(hours=2))
        retain_nothing(table)
    needed = files_of(table, 2)
    with freeze_time(T0 + HOUR):
        kept = reclaim_table(Table.open(table.uri), now=T0 + HOUR)
        assert kept.pinned_versions == (2,) and rows(Table.open(table.uri).read(version=2)) == seen[2]
    assert needed <= data_files_on_disk(tmp_path / "t")
    with freeze_time(T0 + 3 * HOUR):
        assert Table.open(table.uri).pins() == [] and Table.open(table.uri).pins(include_expired=True) == [pin]
        gone = reclaim_table(Table.open(table.uri), now=T0 + 3 * HOUR)
        assert gone.pins_removed == (pin.id,) and gone.pinned_versions == ()
        with pytest.raises(VersionNotFoundError):
            Table.open(table.uri).read(version=2)
    assert Table.open(table.uri).pins(include_expired=True) == []
    assert not needed & data_files_on_disk(tmp_path / "t")
    expire = next(r for r in Table.open(table.uri).history() if r.operation == EXPIRE_OPERATION)
    assert expire.parameters["pins_removed"] == [pin.id]


def test_a_reclamation_that_changes_nothing_commits_nothing(tmp_path: Path) -> None:
    table, _ = overwritten_table(tmp_path / "t", retain_hours=0)
    first = reclaim_table(Table.open(table.uri))
    assert first.expire_version == 5
    for _ in range(3):
        again = reclaim_table(Table.open(table.uri))
        assert again.expire_version is None and again.versions_expired == 0
    assert Table.open(table.uri).version == 5


# -- two processes, the race forced at reclamation's steps ---------------------------------------------------------


LATER = datetime.now(UTC) + timedelta(hours=48)
"""Reclamation's ``now`` in the races: retention (24 h) has passed for every version but the latest, while for
the pinning process (the clock) they are all retained."""


def pin_in_process(uri: str, version: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "maintd", "table", "pin", uri, str(version), "--ttl-hours", "100",
                           "--reason", "race", "--json"], capture_output=True, text=True, timeout=120)


def test_a_pin_landing_between_reclamation_planning_and_its_commit_makes_it_keep_the_version(tmp_path: Path) -> None:
    table, seen = overwritten_table(tmp_path / "t")
    needed = files_of(table, 2)
    assert plan_reclamation(Table.open(table.uri), now=LATER).oldest_retained_version == 4, "version 2 would go"
    steps: list[str] = []
    pinned: list[subprocess.CompletedProcess[str]] = []

    def pin_after_planning(step: str) -> None:
        steps.append(step)
        if step == "plan" and not pinned:
            pinned.append(pin_in_process(table.uri, 2))

    report = reclaim_table(Table.open(table.uri), now=LATER, on_step=pin_after_planning)

    assert pinned[0].returncode == 0, pinned[0].stderr
    pin_id = json.loads(pinned[0].stdout)["id"]
    assert steps.count("plan") == 2, "the race happened: the expire commit met the pin, and reclamation planned again"
    assert report.oldest_retained_version == 2 and report.pinned_versions == (2,)
    assert [p.id for p in Table.open(table.uri).pins()] == [pin_id]
    assert needed <= data_files_on_disk(tmp_path / "t")
    assert rows(Table.open(table.uri).read(version=2)) == seen[2]


def test_a_pin_coming_after_reclamation_committed_its_expiry_is_refused(tmp_path: Path) -> None:
    table, _ = overwritten_table(tmp_path / "t")
    needed = files_of(table, 2)
    pinned: list[subprocess.CompletedProcess[str]] = []

    def pin_after_the_expire_commit(step: str) -> None:
        if step == "expire" and not pinned:
            pinned.append(pin_in_process(table.uri, 2))

    reclaim_table(Table.open(table.uri), now=LATER, on_step=pin_after_the_expire_commit)

    assert pinned and pinned[0].returncode != 0, "by its clock version 2 is retained: only the expire record says no"
    assert "version 2 has expired" in pinned[0].stderr and "pin version 4 or newer" in pinned[0].stderr
    assert Table.open(table.uri).pins(include_expired=True) == []
    assert not needed & data_files_on_disk(tmp_path / "t")


def test_a_pin_whose_version_another_process_expires_before_its_commit_fails_with_a_conflict(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from maintd.table.transaction import Transaction

    with freeze_time(T0):  # version 2 is within the last hour here; for the other process (today) it is long gone
        table, _ = overwritten_table(tmp_path / "t", retain_hours=1)
    needed = files_of(table, 2)
    original = Transaction.commit
    gc: list[subprocess.CompletedProcess[str]] = []

    def reclaim_elsewhere_first(self: Transaction, **kwargs: object) -> int:
        if not gc:  # the pin has validated version 2 against the state it read; now it is expired elsewhere
            gc.append(subprocess.run([sys.executable, "-m", "maintd", "gc", table.uri], capture_output=True,
                                     text=True, timeout=120))
        return original(self, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Transaction, "commit", reclaim_elsewhere_first)
    with freeze_time(T0 + timedelta(minutes=5)), pytest.raises(
            PinConflictError, match="expired every version before 4, so version 2 cannot be pinned any more; pin "
                                    "version 4 or newer"):
        Table.open(table.uri).pin(2, timedelta(hours=1))
    monkeypatch.setattr(Transaction, "commit", original)

    assert gc[0].returncode == 0, gc[0].stderr
    assert Table.open(table.uri).pins(include_expired=True) == [], "the pin was not acknowledged"
    assert not needed & data_files_on_disk(tmp_path / "t")


# -- what operators see ------------------------------------------------------------------------------------------


def test_the_cli_pins_lists_and_unpins(tmp_path: Path) -> None:
    table, _ = overwritten_table(tmp_path / "t")
    runner = CliRunner()
    done = runner.invoke(app, ["table", "pin", table.uri, "2", "--ttl-hours", "2", "--reason", "nightly", "--json"])
    assert done.exit_code == 0, done.stderr
    pin = json.loads(done.stdout)
    retain_nothing(table)
    listed = runner.invoke(app, ["table", "pins", table.uri, "--json"])
    doc = json.loads(listed.stdout)
    assert [(p["id"], p["version"], p["reason"], p["expired"]) for p in doc["pins"]] == [
        (pin["id"], 2, "nightly", False)]
    assert doc["pinned_bytes"] > 0
    text = runner.invoke(app, ["table", "pins", table.uri]).stdout
    assert pin["id"] in text and "nightly" in text and "live" in text
    described = json.loads(runner.invoke(app, ["table", "describe", table.uri, "--json"]).stdout)
    assert [p["id"] for p in described["pins"]] == [pin["id"]] and described["pinned_bytes"] == doc["pinned_bytes"]
    assert "holding back" in runner.invoke(app, ["table", "describe", table.uri]).stdout
    refused = runner.invoke(app, ["purge", table.uri, "--yes"])
    assert refused.exit_code != 0 and "--force-unpin" in refused.stderr
    for args, message in [(["pin", table.uri, "2", "--ttl-hours", "0"], "--ttl-hours 0.0 is not positive"),
                          (["pin", table.uri, "77", "--ttl-hours", "1"], "has no version 77"),
                          (["unpin", table.uri, "nope"], "has no pin 'nope'")]:
        bad = runner.invoke(app, ["table", *args])
        assert bad.exit_code != 0 and message in bad.stderr
    gone = runner.invoke(app, ["table", "unpin", table.uri, pin["id"]])
    assert gone.exit_code == 0 and f"removed pin {pin['id']}" in gone.stdout
    assert json.loads(runner.invoke(app, ["table", "pins", table.uri, "--json"]).stdout)["pins"] == []


def test_held_bytes_are_the_bytes_reclamation_would_delete_but_for_the_pins(tmp_path: Path) -> None:
    table, _ = overwritten_table(tmp_path / "t")
    table.pin(1, timedelta(hours=1))
    retain_nothing(table)
    _, held = held_by_pins(table, table.snapshot(), datetime.now(UTC))
    plan = plan_reclamation(Table.open(table.uri))
    assert held == plan.pinned_bytes == sum((tmp_path / "t" / p).stat().st_size for p in files_of(table, 2))


def test_a_process_pinning_and_reading_while_another_writes_and_reclaims_never_loses_a_pinned_version(
        tmp_path: Path) -> None:
    """Free-running: a writer and reclamation in this process, a pinning reader in another. Retention is 1 hour
    and reclamation runs two hours ahead of the clock: it expires every version but the latest, while the
    reader (by the clock) may pin any of the last hour's. Most pins lose that race (refused or in conflict);
    the reader tries until 5 were acknowledged, and each of those must read the same three times."""
    import threading

    table, _ = overwritten_table(tmp_path / "t", retain_hours=1)
    table.unpin(table.pin(4, timedelta(hours=1)).id)  # the first pin raises the protocol: a writer would conflict
    out, go = tmp_path / "pins.json", tmp_path / "go"
    reader = subprocess.Popen([sys.executable, str(Path(__file__).with_name("pin_worker.py")), table.uri, "5",
                               str(out), str(go)], stderr=subprocess.PIPE, text=True)
    stop = threading.Event()
    errors: list[BaseException] = []
    reclaims = [0]

    def reclaim_until_stopped() -> None:
        while not stop.is_set():
            try:
                reclaim_table(Table.open(table.uri), now=datetime.now(UTC) + 2 * HOUR)
                reclaims[0] += 1
                go.touch()  # the reader pins from now on, while reclamation goes on
            except BaseException as exc:  # reported by the assertion below
                errors.append(exc)
                return

    reclaimer = threading.Thread(target=reclaim_until_stopped)
    reclaimer.start()
    writes = 0
    while reader.poll() is None and (writes < 400 or not go.exists()):
        table.upsert(pa.table({"id": [1000 + writes % 7], "name": [f"w{writes}"]}))
        writes += 1
    _, err = reader.communicate(timeout=300)
    stop.set()
    reclaimer.join(timeout=120)

    assert reader.returncode == 0, err
    assert not errors, errors
    counts = json.loads(out.read_text())
    assert counts["unreadable"] == [], counts
    assert counts["acknowledged"] + counts["refused"] + counts["conflicts"] == counts["attempts"]
    assert counts["acknowledged"] == 5 and reclaims[0] > 0, counts  # the race happened: 5 pins held through it
    print(f"pin race: {counts}, {reclaims[0]} reclamations, {writes} writes")
    assert Table.open(table.uri).pins(include_expired=True) == []


def test_a_commit_between_reclamation_listing_and_loading_the_table_expires_nothing_retained(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The listing is taken before the snapshot: commits in between are not in it. The oldest buildable version
    is found in the run of listed commits (not in one ending at the newer latest version, where every version
    before it would look unbuildable and be expired, pinned or within retention)."""
    import maintd.reclaim.retention as retention

    table, _ = overwritten_table(tmp_path / "t")  # retention 24 h: every version is retained
    real = retention.list_files

    def list_then_commit(t: Table) -> object:
        listing = real(t)
        for i in range(2):
            table.upsert(pa.table({"id": [77 + i], "name": ["late"]}))
        return listing

    monkeypatch.setattr(retention, "list_files", list_then_commit)
    plan = plan_reclamation(Table.open(table.uri))
    assert plan.oldest_available_version == 0 and plan.oldest_retained_version == 0 and plan.log_files == ()
