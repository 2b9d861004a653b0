#!/usr/bin/env bash
# `make bench`: run the benchmarks and write docs/BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
PATH="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1):$PATH" exec .venv/bin/python -m tests.bench.run "$@"
