#!/usr/bin/env bash
# `make run`'s monitoring: Prometheus with the shipped rules and Alertmanager with the shipped
# config (deploy/prometheus/), pointed at this portal, when both are installed (make packages).
# Ports follow the portal's: PORT+1090 for Prometheus, PORT+1093 for Alertmanager (8000: 9090,
# 9093). The webhook secret is var/monitoring/alerts-secret (run.sh exports it to the portal).
# The portal's port is PORTAL_PORT (run.sh exports it): honcho gives each process of the
# Procfile a PORT of its own (the base + 100 per line above it), and this one's named the
# webhook 500 ports off (PORT=8011: Alertmanager posted to 127.0.0.1:8511). PORT alone is
# only read when this script runs by itself. The configs are written anew at every start.
set -euo pipefail
cd "$(dirname "$0")/../.."
PORT=${PORTAL_PORT:-${PORT:-8000}}
HOST=${PORTAL_HOST:-127.0.0.1}
if ! command -v prometheus >/dev/null || ! command -v prometheus-alertmanager >/dev/null; then
  echo "prometheus / prometheus-alertmanager not installed: no alerts in this run."
  exec sleep infinity
fi
dir=${PORTAL_MONITORING_DIR:-var/monitoring} # tests/deploy/test_dev_monitoring.py: its own
mkdir -p "$dir"
[[ $dir == /* ]] || dir=$PWD/$dir
prom_port=$((PORT + 1090))
am_port=$((PORT + 1093))
cp deploy/prometheus/portal.rules.yml "$dir/portal.rules.yml"
sed -e "s#https://portal.example.org/alerts/webhook#http://$HOST:$PORT/alerts/webhook#" \
  -e "s#/etc/prometheus/portal-alerts-secret#$dir/alerts-secret#" \
  deploy/prometheus/alertmanager.yml >"$dir/alertmanager.yml"
sed -e "s#127.0.0.1:8000#$HOST:$PORT#" -e "s#127.0.0.1:9093#127.0.0.1:$am_port#" \
  deploy/prometheus/prometheus.yml >"$dir/prometheus.yml"
prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/prometheus" \
  --web.listen-address="127.0.0.1:$prom_port" --log.level=warn &
prometheus-alertmanager --config.file="$dir/alertmanager.yml" --storage.path="$dir/alertmanager" \
  --web.listen-address="127.0.0.1:$am_port" --cluster.listen-address= --log.level=warn &
echo "Prometheus: http://127.0.0.1:$prom_port/  Alertmanager: http://127.0.0.1:$am_port/"
trap 'kill $(jobs -p) 2>/dev/null' EXIT
wait -n
