"""Every command on bad input: one clear line on stderr, a non-zero exit, no traceback, no password.

The commands run through :func:`maintd.cli.main`, the entry point of the ``maintd`` script, in this
process (a subprocess per case would cost seconds of imports each); a subprocess checks the same once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from maintd import Table
from maintd.cli import main

SECRET = "postgresql+psycopg://maintd:hunter2@127.0.0.1:1/maintd"


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in [k for k in os.environ if k.startswith("MAINTD_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)


def table(tmp: Path) -> str:
    path = tmp / "orders"
    if not path.exists():
        Table.create(str(path), "id:int64!,name:string", primary_key="id")
    return str(path)


def not_a_table(tmp: Path) -> str:
    (tmp / "plain").mkdir(exist_ok=True)
    return str(tmp / "plain")


def file_path(tmp: Path, name: str, text: str) -> str:
    (tmp / name).write_text(text)
    return str(tmp / name)


Case = Callable[[Path], list[str]]
CASES: dict[str, Case] = {
    "table describe of a directory that is not a table": lambda t: ["table", "describe", not_a_table(t)],
    "table describe of a missing path": lambda t: ["table", "describe", str(t / "missing")],
    "table describe of a file": lambda t: ["table", "describe", file_path(t, "f.txt", "x")],
    "table describe of a version never written": lambda t: ["table", "describe", table(t), "--version", "9"],
    "table history of a directory that is not a table": lambda t: ["table", "history", not_a_table(t)],
    "table create on a table": lambda t: ["table", "create", table(t), "--schema", "id:int64!", "--primary-key", "id"],
    "table create with an unknown type": lambda t: ["table", "create", str(t / "n"), "--schema", "id:int65",
                                                    "--primary-key", "id"],
    "table create with a key not in the schema": lambda t: ["table", "create", str(t / "n"), "--schema", "id:int64!",
                                                            "--primary-key", "nope"],
    "table create with a bad property": lambda t: ["table", "create", str(t / "n"), "--schema", "id:int64!",
                                                   "--primary-key", "id", "--property", "acid.data.retain.hours=-1"],
    "table set-properties with an item that is not KEY=VALUE": lambda t: ["table", "set-properties", table(t),
                                                                           "--property", "novalue"],
    "table set-properties with an unknown property": lambda t: ["table", "set-properties", table(t),
                                                                "--property", "no.such.property=1"],
    "table set-properties with a prior-rows switch that is not a boolean": lambda t: [
        "table", "set-properties", table(t), "--property", "changes.prior.rows=sometimes"],
    "read of a directory that is not a table": lambda t: ["read", not_a_table(t)],
    "read at a time that is not a time": lambda t: ["read", table(t), "--as-of", "yesterday-ish"],
    "read of a column that does not exist": lambda t: ["read", table(t), "--column", "nope"],
    "read into a file that is not parquet": lambda t: ["read", table(t), "--output", str(t / "x.csv")],
    "read changes of a version never written": lambda t: ["read", table(t), "--changes-from", "7"],
    "plan of a directory that is not a table": lambda t: ["plan", not_a_table(t)],
    "plan of a missing path": lambda t: ["plan", str(t / "missing")],
    "plan with a missing policy file": lambda t: ["plan", table(t), "--policy", str(t / "none.yaml")],
    "plan with a policy that is not YAML": lambda t: ["plan", table(t), "--policy", file_path(t, "p.yaml", "a: [")],
    "run of a directory that is not a table": lambda t: ["run", not_a_table(t)],
    "run with a missing settings file": lambda t: ["run", table(t), "--config", str(t / "none.yaml")],
    "run with settings that are not YAML": lambda t: ["run", table(t), "--config", file_path(t, "s.yaml", "a: [")],
    "run with an invalid setting": lambda t: ["run", table(t), "--config",
                                              file_path(t, "s.yaml", "scheduler:\n  jitter_seconds: -1\n")],
    "run with an unreachable store": lambda t: ["run", table(t), "--config",
                                                file_path(t, "s.yaml", f"store:\n  url: {SECRET}\n")],
    "gc of a directory that is not a table": lambda t: ["gc", not_a_table(t)],
    "gc of a missing path beside a table": lambda t: ["gc", table(t), str(t / "missing"), "--dry-run"],
    "gc with a short orphan grace": lambda t: ["gc", table(t), "--orphan-grace-hours", "0.1"],
    "gc without tables": lambda t: ["gc"],
    "purge of a directory that is not a table": lambda t: ["purge", not_a_table(t), "--dry-run"],
    "purge of a partition given twice": lambda t: ["purge", table(t), "--partition", "a=1", "--partition", "a=2"],
    "purge unattended without --yes": lambda t: ["purge", table(t)],
    "status without a store": lambda t: ["status"],
    "status with a malformed store URL": lambda t: ["status", "--config", file_path(
        t, "s.yaml", "store:\n  url: postgres//maintd:hunter2@db/maintd\n")],
    "status of an unreachable store": lambda t: ["status", "--config",
                                                 file_path(t, "s.yaml", f"store:\n  url: {SECRET}\n")],
    "history of an unreachable store": lambda t: ["history", "--config",
                                                  file_path(t, "s.yaml", f"store:\n  url: {SECRET}\n")],
    "store upgrade of an unreachable store": lambda t: ["store", "upgrade", "--config",
                                                        file_path(t, "s.yaml", f"store:\n  url: {SECRET}\n")],
    "store upgrade of an unsupported database": lambda t: ["store", "upgrade", "--config",
                                                           file_path(t, "s.yaml", "store:\n  url: mysql://u:hunter2@h/d\n")],
    "daemon with an invalid setting": lambda t: ["daemon", "--config",
                                                 file_path(t, "s.yaml", "http:\n  port: 70000\n")],
    "daemon with a broken policy": lambda t: ["daemon", "--config", file_path(
        t, "s.yaml", f"policy:\n  path: {file_path(t, 'p.yaml', 'default: {compaction: {max_delta_files: x}}')}\n")],
}


FAILED_WORK = {case for case in CASES if "unreachable store" in case}
"""Cases whose input is right but whose work fails (exit 1): a store that does not answer. Every other case is
bad input (exit 2): README, "Exit codes"."""


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_gets_one_error_line_and_no_traceback(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = CASES[case](tmp_path)
    capsys.readouterr()
    with pytest.raises(SystemExit) as caught:
        main(argv)
    out, err = capsys.readouterr()
    assert caught.value.code == (1 if case in FAILED_WORK else 2), (caught.value.code, out, err)
    assert "Traceback" not in out + err, err
    assert "hunter2" not in out + err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert errors, f"no 'error:' line on stderr: {err!r}"
    assert len(errors[0]) > len("error: ") + 10, "the line says what is wrong"
    if case in ONE_LINE:
        assert err.strip().splitlines() == errors[:1], err


ONE_LINE = {"status with a malformed store URL", "run with an invalid setting", "plan of a missing path",
            "gc of a missing path beside a table"}
"""Cases whose whole stderr is the one error line."""


def test_the_maintd_script_prints_one_line_for_a_directory_that_is_not_a_table(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAINTD_")}
    result = subprocess.run([sys.executable, "-m", "maintd", "run", not_a_table(tmp_path)], capture_output=True,
                            text=True, env=env, cwd=tmp_path, timeout=120, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"error: no table at {tmp_path / 'plain'} (no "
                                                  f"{tmp_path / 'plain'}/_log/); create it first"]
