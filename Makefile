# The network portal. A newcomer needs two commands: `make run` and `make test`.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PY := .venv/bin/python
PORT ?= 8000
export PORT

.PHONY: help packages venv services services-stop messages setup run firewall-reload test bench lint lab lab-down clean-var

help:
	@echo "make run    - the portal with demo data, workers and the firewall lab at http://127.0.0.1:$(PORT)"
	@echo "make firewall-reload - beside \`make run\`: restart the firewall worker without a gap (new code)"
	@echo "make test   - the whole test suite (installs and starts what it needs)"
	@echo "make bench  - benchmarks, written to docs/BENCHMARKS.md"
	@echo "make lint   - ruff and the import contracts (lint-imports)"
	@echo "make services / services-stop - the embedded PostgreSQL and Redis under ./var"
	@echo "make lab / lab-down - the local firewall lab (network namespaces, root only)"

packages:
	@bash deploy/dev/packages.sh

venv: packages
	@bash deploy/dev/venv.sh

services: packages
	@bash deploy/dev/services.sh start

services-stop:
	@bash deploy/dev/services.sh stop

messages: venv
	@$(PY) manage.py compilemessages -l de --ignore=.venv --ignore=var -v0

setup: venv services messages
	@$(PY) manage.py preflight
	@$(PY) manage.py migrate --no-input -v0

run: setup
	@bash deploy/dev/run.sh

# The firewall worker of `make run` hands over to a new one (apps/infra/handover.py): the new
# worker warms up while the old one serves, then the old one stops.
firewall-reload:
	@test -s var/run/firewall-worker.pid || { echo "No firewall worker of \`make run\` runs here."; exit 1; }
	@kill -HUP $$(cat var/run/firewall-worker.pid) && echo "The firewall worker hands over to a new one."

test: setup
	@bash deploy/dev/test.sh

bench: setup
	@bash deploy/dev/bench.sh

lint: venv
	@.venv/bin/ruff check .
	@.venv/bin/ruff format --check .
	@.venv/bin/lint-imports --no-cache

lab: packages
	@bash deploy/lab/lab.sh up

lab-down:
	@bash deploy/lab/lab.sh down
