#!/usr/bin/env bash
# Regenerate the lock files from pyproject.toml (after changing a dependency). The image installs
# requirements/runtime.lock (+ build.lock), CI installs requirements/ci.lock (+ build.lock): the same pins
# for every package they share, with hashes. Needs uv (pip install uv; or UV=/path/to/uv) and PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
common=(--generate-hashes --universal --python-version 3.11 --quiet -c requirements/constraints.txt)
"${UV:-uv}" pip compile pyproject.toml --extra postgres "${common[@]}" -o requirements/runtime.lock
"${UV:-uv}" pip compile pyproject.toml --extra postgres --extra test -c requirements/runtime.lock "${common[@]}" \
  -o requirements/ci.lock
"${UV:-uv}" pip compile requirements/build.in -c requirements/ci.lock "${common[@]}" -o requirements/build.lock
