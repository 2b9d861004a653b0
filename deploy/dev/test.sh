#!/usr/bin/env bash
# `make test`: the whole suite against the real services. Extra arguments: PYTEST_ARGS.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p test-artifacts
exec .venv/bin/pytest ${PYTEST_ARGS:-}
