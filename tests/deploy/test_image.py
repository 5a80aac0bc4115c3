"""The image: built in stages from the lock files CI installs too, base pinned by digest, and its runtime
environment (any UID without a passwd entry, read-only root filesystem, writable emptyDirs) able to run
Spark maintenance.

No Docker engine runs here, so the image is not built; its runtime environment is reproduced instead with
Linux namespaces: a user namespace maps the test to UID 12345, which has no passwd entry, a mount
namespace makes the root filesystem read-only and mounts tmpfs where the Helm chart mounts emptyDirs
(``/tmp``, ``/home/maintd``, ``/var/lib/maintd``), and the image's entrypoint script runs ``maintd run``
with the environment the Dockerfile sets. The test is skipped where namespaces or nss_wrapper are not
available (``.ci/run`` installs nss_wrapper).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
LOCKS = ROOT / "requirements"


def pins(lock: Path) -> dict[str, tuple[str, frozenset[str]]]:
    """Package to (pinned version, hashes), for the packages of a lock that apply to this platform."""
    from packaging.markers import Marker

    found: dict[str, tuple[str, frozenset[str]]] = {}
    for block in re.split(r"\n(?=[a-z0-9])", lock.read_text()):
        line = block.split("\\", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        spec, _, marker = line.partition(";")
        if marker.strip() and not Marker(marker.strip()).evaluate():
            continue
        name, version = spec.strip().split("==")
        found[name.lower()] = (version, frozenset(re.findall(r"--hash=(sha256:[0-9a-f]{64})", block)))
    return found


def test_the_image_is_built_in_stages_from_hashed_lock_files_on_a_base_pinned_by_digest() -> None:
    bases = re.findall(r"^FROM (\S+)", DOCKERFILE, re.MULTILINE)
    assert len(bases) >= 2, "a build stage and a runtime stage"
    [base] = re.findall(r"^ARG BASE=(\S+)$", DOCKERFILE, re.MULTILINE)
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm@sha256:[0-9a-f]{64}", base)
    assert all(b.startswith("${BASE}") for b in bases)
    assert "--require-hashes" in DOCKERFILE and "requirements/runtime.lock" in DOCKERFILE
    assert 'ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/maintd-entrypoint"]' in DOCKERFILE
    assert re.search(r"^USER \d+:0$", DOCKERFILE, re.MULTILINE), "numeric, no passwd entry needed"


def test_ci_installs_the_very_pins_the_image_installs_and_they_satisfy_pyproject() -> None:
    import tomllib

    ci_script = (ROOT / ".ci" / "run").read_text()
    assert "--require-hashes -r requirements/ci.lock -r requirements/build.lock" in ci_script
    runtime, ci, build = pins(LOCKS / "runtime.lock"), pins(LOCKS / "ci.lock"), pins(LOCKS / "build.lock")
    for name, pinned in runtime.items():
        assert ci.get(name) == pinned, f"{name}: the image and CI must install the same release"
    for name, pinned in build.items():
        assert name not in ci or ci[name] == pinned, name
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["postgres"]]
    for text in wanted:
        requirement = Requirement(text)
        version, hashes = runtime[requirement.name.lower().replace("_", "-")]
        assert requirement.specifier.contains(version), f"{text}: the lock pins {version}; run scripts/lock.sh"
        assert hashes
    for text in project["optional-dependencies"]["test"]:
        requirement = Requirement(text)
        assert requirement.specifier.contains(ci[requirement.name.lower()][0]), f"{text}: run scripts/lock.sh"


def dockerfile_env() -> dict[str, str]:
    """The ENV of the Dockerfile's runtime stage."""
    runtime = DOCKERFILE.rsplit("\nFROM ", 1)[1].replace("\\\n", " ")
    env: dict[str, str] = {}
    for line in runtime.splitlines():
        if line.startswith("ENV "):
            env.update(dict(pair.split("=", 1) for pair in line[4:].split()))
    return env


POLICY = """
default:
  compaction:
    max_delta_files: 6
    min_interval_hours: 0
"""

CONTAINER = r"""
set -e
mount --bind "$DATA" /srv
fd=3; for p in $KEEP; do eval "exec $fd< \"\$p\""; fd=$((fd + 1)); done
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /home && mkdir /home/maintd
mount -t tmpfs tmpfs /var/lib && mkdir /var/lib/maintd /var/lib/scratch
fd=3; for p in $KEEP; do
  mkdir -p "$p" && mount --no-canonicalize --bind "/proc/$$/fd/$fd" "$p" && eval "exec $fd<&-"; fd=$((fd + 1))
done
mount -o bind,remount,ro /
exec unshare --user --map-user=12345 --map-group=12345 "$@"
"""
EMPTY_DIRS = (Path("/tmp"), Path("/home"), Path("/var/lib"))


def kept_paths() -> list[str]:
    """The checkout and the interpreter where they lie below a directory the container covers with tmpfs
    (a clone under /tmp, say): the script holds them open and binds them back after the tmpfs mounts."""
    wanted = sorted({ROOT, Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}, key=lambda p: len(p.parts))
    kept: list[Path] = []
    for path in wanted:
        if any(path.is_relative_to(d) for d in EMPTY_DIRS) and not any(path.is_relative_to(k) for k in kept):
            kept.append(path)
    return [str(p) for p in kept]


def in_container(
    command: list[str], data: Path, env: dict[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``command`` as the image would run it (see the module docstring), ``data`` mounted at /srv."""
    return subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", CONTAINER, "container", *command],
        env={**env, "DATA": str(data), "KEEP": " ".join(kept_paths())}, capture_output=True, text=True,
        timeout=timeout, check=False,
    )


@pytest.fixture(scope="module")
def image_env() -> dict[str, str]:
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True,
                           check=False)
    if probe.returncode != 0:
        pytest.skip(f"user and mount namespaces are not available here: {probe.stderr.decode().strip()}")
    libraries = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib", "/lib")
    if not any(Path(d, "libnss_wrapper.so").exists() for d in libraries):
        pytest.skip("nss_wrapper is not installed (Debian: libnss-wrapper; .ci/run installs it)")
    env = {k: v for k, v in dockerfile_env().items() if not k.startswith(("PATH", "PYSPARK"))}
    env["SPARK_LOCAL_DIRS"] = "/var/lib/scratch"  # /scratch cannot be made on this machine's root
    java = Path(shutil.which("java") or "/usr/bin/java").resolve()
    return {**env, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "JAVA_HOME": str(java.parents[1]),
            "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


def test_the_entrypoint_names_a_uid_that_has_no_passwd_entry(image_env: dict[str, str], tmp_path: Path) -> None:
    who = [sys.executable, "-c", "import os, pwd; print(pwd.getpwuid(os.getuid()).pw_name, os.path.expanduser('~'))"]
    bare = in_container(who, tmp_path, image_env)
    assert bare.returncode != 0 and "KeyError" in bare.stderr, "UID 12345 has no passwd entry"
    named = in_container([str(ENTRYPOINT), *who], tmp_path, image_env)
    assert named.returncode == 0, named.stderr
    assert named.stdout.split() == ["maintd", "/home/maintd"]


@pytest.mark.slow
def test_maintd_runs_spark_maintenance_as_an_unnamed_uid_on_a_read_only_root(
    image_env: dict[str, str], tmp_path: Path
) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from service.warehouse import Model, create, read_sorted, write

    table, model = create(tmp_path / "wh" / "orders"), Model()
    write(table, model, commits=8, seed=5)
    (tmp_path / "policy.yaml").write_text(POLICY)
    os.chmod(tmp_path, 0o755)
    env = {**image_env, "MAINTD_SPARK__MASTER": "local[1]", "MAINTD_SPARK__DRIVER_MEMORY": "512m"}
    result = in_container([str(ENTRYPOINT), sys.executable, "-m", "maintd", "run", "/srv/wh/orders", "--json",
                           "--no-reclaim", "--policy", "/srv/policy.yaml"], tmp_path, env)
    assert result.returncode == 0, result.stderr[-4000:]
    [outcome] = json.loads(result.stdout)
    assert outcome["status"] == "ok" and outcome["tasks_committed"] == outcome["tasks_planned"] > 0
    assert "LoginException" not in result.stderr and "basedir must be absolute" not in result.stderr
    for line in result.stderr.splitlines():  # MAINTD_LOGGING__JSON=true in the image: the JVM's lines too
        if line.strip():
            json.loads(line)
    assert read_sorted(table.uri).equals(model.table())
