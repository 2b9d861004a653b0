#!/usr/bin/env bash
# `make test`: the whole suite against the real services. Extra arguments: PYTEST_ARGS.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p test-artifacts
# Shell words, so quoting works: PYTEST_ARGS="-m 'not lab' -x"
eval "set -- ${PYTEST_ARGS:-}"
exec .venv/bin/pytest "$@"
