"""Every third-party module maintd imports is pinned in the image's lock file.

The image installs ``requirements/runtime.lock`` only, while the test environment installs the CI lock, which
holds test and build tools too. A package maintd imports but does not declare (pulled in, say, by a test tool,
as ``click`` once was by an older ``typer``) passes every test and breaks the image's CLI. This test reads
every import in ``maintd/`` (lazy ones inside functions too) and looks each one up in the runtime lock.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_EXTRAS = {"postgres"}
"""The extras the image installs (``scripts/lock.sh`` compiles the runtime lock with them)."""
TOOL_EXTRAS = {"test", "bench", "mutation"}
"""Extras of tools around maintd, never of maintd itself: maintd may not import what only they bring."""


def optional_distributions() -> set[str]:
    """Distributions of the other extras (``duckdb``, ``polars``, ``plot``...): maintd imports them only when
    asked for, and a missing one is an error naming the extra (``maintd.table.read.interop.require``)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return {normalize(re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0])
            for name, reqs in extras.items() if name not in RUNTIME_EXTRAS | TOOL_EXTRAS for req in reqs}


def imported_modules() -> dict[str, set[str]]:
    """Top-level module name -> the files of ``maintd/`` that import it."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "maintd").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(ROOT)))
    return found


def locked() -> set[str]:
    text = (ROOT / "requirements" / "runtime.lock").read_text()
    return {normalize(m) for m in re.findall(r"^([A-Za-z0-9_.-]+)==", text, re.MULTILINE)}


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_third_party_import_of_maintd_is_pinned_in_the_runtime_lock() -> None:
    dists = packages_distributions()
    pinned = locked()
    optional = optional_distributions()
    third_party = {m: files for m, files in imported_modules().items()
                   if m != "maintd" and m not in sys.stdlib_module_names
                   and not (m in dists and {normalize(d) for d in dists[m]} <= optional)}
    assert "pyarrow" in third_party and "typer" in third_party  # the walk sees the imports
    unknown = sorted(m for m in third_party if m not in dists)
    assert not unknown, f"modules no installed distribution provides: {unknown}"
    missing = {m: sorted(third_party[m]) for m in third_party
               if not any(normalize(d) in pinned for d in dists[m])}
    assert not missing, f"imported by maintd but not in requirements/runtime.lock (declare them in pyproject.toml " \
                        f"and run scripts/lock.sh): {missing}"
