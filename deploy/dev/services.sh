#!/usr/bin/env bash
# The embedded development services: a project-local PostgreSQL cluster and redis-server,
# both under ./var, on Unix sockets only (no TCP port to collide with anything).
# Skipped when DATABASE_URL / CELERY_BROKER_URL point at real servers.
#   services.sh start|stop|status
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VAR="$ROOT/var"
RUN="$VAR/run"
PGDATA="$VAR/postgres"
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
REDIS_SOCK="$RUN/redis.sock"

die() { echo "services: $*" >&2; exit 1; }

as_pg() {
  # PostgreSQL refuses to run as root: as root, run it as the Debian 'postgres' user.
  if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

ensure_traversable() {
  # The postgres user must reach $VAR: give other users search (x) permission on any
  # ancestor directory that blocks it (for example a clone under /root).
  [[ $(id -u) -eq 0 ]] || return 0
  runuser -u postgres -- test -x "$VAR" 2>/dev/null && return 0
  local path="" part parts
  IFS=/ read -r -a parts <<<"${VAR#/}"
  for part in "${parts[@]}"; do
    path="$path/$part"
    if ! runuser -u postgres -- test -x "$path" 2>/dev/null; then
      echo "services: chmod o+x $path so that PostgreSQL (user postgres) can reach ./var"
      chmod o+x "$path"
    fi
  done
}

pg_start() {
  [[ -n "${DATABASE_URL:-}" ]] && return 0
  [[ -x "$PGBIN/initdb" ]] || die "PostgreSQL server binaries not found under /usr/lib/postgresql (package 'postgresql')."
  mkdir -p "$RUN" "$VAR/log"
  ensure_traversable
  if [[ $(id -u) -eq 0 ]]; then chown postgres: "$RUN" "$VAR/log"; fi
  if [[ ! -f "$PGDATA/PG_VERSION" ]]; then
    echo "services: creating the PostgreSQL cluster in var/postgres"
    mkdir -p "$PGDATA"
    [[ $(id -u) -eq 0 ]] && chown postgres: "$PGDATA"
    as_pg "$PGBIN/initdb" -D "$PGDATA" -U portal --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
    cat >>"$PGDATA/postgresql.conf" <<CONF
# network portal: embedded development cluster (Unix socket only)
listen_addresses = ''
unix_socket_directories = '$RUN'
unix_socket_permissions = 0700
max_connections = 200
shared_buffers = 256MB
fsync = off
synchronous_commit = off
full_page_writes = off
CONF
  fi
  if ! as_pg "$PGBIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; then
    as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -l "$VAR/log/postgres.log" -w -t 60 start >/dev/null \
      || die "PostgreSQL did not start; see var/log/postgres.log"
  fi
  local exists
  exists=$("$PGBIN/psql" -h "$RUN" -U portal -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'portal'")
  if [[ "$exists" != "1" ]]; then
    "$PGBIN/createdb" -h "$RUN" -U portal portal
  fi
}

redis_running() { redis-cli -s "$REDIS_SOCK" ping >/dev/null 2>&1; }

redis_start() {
  [[ -n "${CELERY_BROKER_URL:-}" && -n "${REDIS_URL:-}" ]] && return 0
  command -v redis-server >/dev/null || die "redis-server not found (package 'redis-server')."
  mkdir -p "$RUN" "$VAR/redis" "$VAR/log"
  redis_running && return 0
  redis-server --port 0 --unixsocket "$REDIS_SOCK" --unixsocketperm 700 \
    --daemonize yes --pidfile "$RUN/redis.pid" --dir "$VAR/redis" \
    --logfile "$VAR/log/redis.log" --save "" --appendonly yes --appendfsync everysec
  for _ in $(seq 50); do redis_running && return 0; sleep 0.1; done
  die "redis-server did not start; see var/log/redis.log"
}

case "${1:-start}" in
  start) pg_start; redis_start ;;
  stop)
    if [[ -f "$PGDATA/PG_VERSION" ]]; then
      as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null 2>&1 || true
    fi
    if redis_running; then redis-cli -s "$REDIS_SOCK" shutdown nosave >/dev/null 2>&1 || true; fi
    ;;
  status)
    as_pg "$PGBIN/pg_ctl" -D "$PGDATA" status || true
    redis_running && echo "redis: running ($REDIS_SOCK)" || echo "redis: stopped"
    ;;
  *) die "usage: services.sh start|stop|status" ;;
esac
