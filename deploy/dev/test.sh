#!/usr/bin/env bash
# `make test`: the whole suite against the real services. Extra arguments: PYTEST_ARGS.
#
# Without PYTEST_ARGS it runs in two phases: the unit and integration tests on several processes
# (pytest-xdist: each worker has a test database and a Redis database of its own,
# portal/settings_test.py), then everything else on one (the lab is one set of namespaces, the
# kernel lab one boot, the browsers' and the lab's timing wants the cores). PORTAL_TEST_WORKERS
# sets the first phase's processes (default: the cores, 2 to 4; 1 runs it serially).
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p test-artifacts
# Shell words, so quoting works: PYTEST_ARGS="-m 'not lab' -x"
eval "set -- ${PYTEST_ARGS:-}"
status=0
if [[ $# -gt 0 ]]; then
  .venv/bin/pytest "$@" || status=$?
else
  cores=$(nproc)
  workers=${PORTAL_TEST_WORKERS:-$((cores < 2 ? 2 : (cores > 4 ? 4 : cores)))}
  [[ "$workers" =~ ^[1-6]$ ]] || { echo "PORTAL_TEST_WORKERS: 1 to 6, not '$workers'" >&2; exit 2; }
  if [[ "$workers" == 1 ]]; then
    .venv/bin/pytest || status=$?
  else
    started=$SECONDS
    .venv/bin/pytest -n "$workers" tests/unit tests/integration || status=$?
    echo "make test: unit and integration tests on $workers processes: $((SECONDS - started)) s"
    started=$SECONDS
    # The second phase adds its skipped tests to the first one's (tests/conftest.py).
    PORTAL_TEST_PHASE=2 .venv/bin/pytest tests --ignore=tests/unit --ignore=tests/integration \
      || status=$?
    echo "make test: the rest on one process: $((SECONDS - started)) s"
  fi
fi
# The last line names every skipped test's reason (without root: those that need it), from
# tests/conftest.py.
if [[ -f test-artifacts/skipped.txt ]]; then
  cat test-artifacts/skipped.txt
fi
exit "$status"
