#!/usr/bin/env bash
# `make test`: the whole suite against the real services. Extra arguments: PYTEST_ARGS.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p test-artifacts
# Shell words, so quoting works: PYTEST_ARGS="-m 'not lab' -x"
eval "set -- ${PYTEST_ARGS:-}"
status=0
.venv/bin/pytest "$@" || status=$?
# The last line names every skipped test's reason (without root: those that need it), from
# tests/conftest.py.
if [[ -f test-artifacts/skipped.txt ]]; then
  cat test-artifacts/skipped.txt
fi
exit "$status"
