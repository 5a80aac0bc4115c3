"""``maintd gc``, ``maintd purge`` and ``maintd run`` killed with SIGKILL at random storage operations (a few
seeds here; ``scripts/crash_sweep.py`` runs many): the table stays readable, every retained version reads as
recorded, a later run completes, and the orphans the kill left go once older than the grace. The table's key
holds a date partition column in its middle (the sweep draws a shape per seed)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from crash_helpers import Template, build_template, kill_and_recover, run_command, storage_operations, write_config
from shapes import MATRIX

from maintd.storage.faulty import Fault


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    shape = next(s for s in MATRIX if s.name == "key (a, dt, b), date partition in the middle")
    return build_template(tmp_path_factory.mktemp("template") / "t", shape)


@pytest.fixture(scope="module")
def operations(template: Template, tmp_path_factory: pytest.TempPathFactory) -> dict[str, int]:
    """How many storage operations an uninterrupted gc and purge make on the template."""
    out = {}
    for command in ("gc", "purge"):
        work = tmp_path_factory.mktemp(f"count-{command}")
        done = run_command(command, str(template.copy(work / "t")), write_config(work))
        assert done.returncode == 0, done.stderr
        out[command] = storage_operations(done)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("seed", [11, 12])
@pytest.mark.parametrize("command", ["gc", "purge"])
def test_gc_and_purge_killed_at_a_random_storage_operation_lose_nothing_and_finish_later(
        template: Template, operations: dict[str, int], tmp_path: Path, command: str, seed: int) -> None:
    rng = random.Random(seed)
    fault = Fault(rng.choice(["crash", "crash_after"]), nth=rng.randint(1, operations[command]))

    killed, problems = kill_and_recover(template, command, tmp_path, [fault])

    assert killed, f"{command} was not killed by {fault}"
    assert not problems, "\n".join(problems)


@pytest.mark.slow
@pytest.mark.spark
def test_maintd_run_killed_before_and_right_after_its_commit_loses_nothing_and_finishes_later(
        template: Template, tmp_path: Path) -> None:
    """``maintd run`` (Spark) killed once when its rewrite is written but not committed (its outputs become
    orphans), then once right after its commit landed, before it reclaims: the table reads as recorded after
    each kill, the next run completes, and the orphans go after the grace."""
    before = [Fault("crash", op="put_if_absent", path="_log/*.json")]
    after = [Fault("crash_after", op="put_if_absent", path="_log/*.json")]

    killed, problems = kill_and_recover(template, "run", tmp_path, before, after)

    assert killed and not problems, "\n".join(problems)
