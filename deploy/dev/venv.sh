#!/usr/bin/env bash
# Create .venv and install the pinned dependencies of pyproject.toml (runtime + dev).
# Re-runs install only when pyproject.toml changed (a stamp holds its hash).
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-/usr/bin/python3}
stamp=.venv/.deps-$(sha256sum pyproject.toml | cut -c1-16)
[[ -f $stamp ]] && exit 0
if [[ ! -x .venv/bin/python ]]; then
  "$PYTHON" -m venv .venv
fi
reqs=$(mktemp)
trap 'rm -f "$reqs"' EXIT
.venv/bin/python - "$reqs" <<'PY'
import sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
deps = project["dependencies"] + project["optional-dependencies"]["dev"]
open(sys.argv[1], "w").write("\n".join(deps) + "\n")
PY
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r "$reqs"
rm -f .venv/.deps-*
touch "$stamp"
