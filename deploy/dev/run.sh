#!/usr/bin/env bash
# `make run`: demo data, the lab when possible, then web + worker + beat in the foreground.
set -euo pipefail
cd "$(dirname "$0")/../.."
PORT=${PORT:-8000}
HOST=${PORTAL_HOST:-127.0.0.1}

if ! .venv/bin/python - "$HOST" "$PORT" <<'PY'
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind((sys.argv[1], int(sys.argv[2])))
except OSError as exc:
    sys.exit(f"Port {sys.argv[2]} on {sys.argv[1]} is already in use ({exc.strerror}). "
             f"Stop the program that holds it (see `ss -ltnp 'sport = :{sys.argv[2]}'`) "
             f"or choose another port: make run PORT=8001")
PY
then
  exit 1
fi

.venv/bin/python manage.py seed_demo
if [[ -x deploy/lab/lab.sh ]]; then
  if [[ $(id -u) -eq 0 ]]; then
    if bash deploy/lab/lab.sh up; then
      .venv/bin/python manage.py lab_register --no-devices
      .venv/bin/python manage.py lab_resolver
      .venv/bin/python manage.py firewall_push --now --cause "make run"
      # Demo devices lease their reserved addresses from Kea like real ones (lab.sh client MAC);
      # unregistered ones reach the portal at http://203.0.113.80/ (the walled garden).
      bash deploy/lab/lab.sh portal-proxy "$PORT" || true
      .venv/bin/python manage.py lab_clients || echo "Some demo devices got no lease (see above)."
    else
      echo "The firewall lab could not be built; the portal runs without a reachable firewall."
    fi
  else
    echo "Not root: the firewall lab (network namespaces) is not built; no firewall is reachable."
  fi
fi
# Alertmanager (deploy/dev/monitoring.sh) calls the portal's webhook with this shared secret.
mkdir -p var/monitoring
[[ -s var/monitoring/alerts-secret ]] || (umask 077 && openssl rand -hex 24 >var/monitoring/alerts-secret)
PORTAL_ALERTS_WEBHOOK_SECRET=$(cat var/monitoring/alerts-secret)
# honcho sets PORT anew for each process (its base + 100 per Procfile line): the portal's own
# port goes as PORTAL_PORT (the web server and the monitoring's webhook use it).
PORTAL_PORT=$PORT
export PORTAL_ALERTS_WEBHOOK_SECRET PORT PORTAL_PORT
echo "Portal: http://$HOST:$PORT/  (logins resident, volunteer, support, admin; password demo)"
# The lab tests check this file: they refuse to replace a lab that a running portal uses.
mkdir -p var/run && echo $$ >var/run/make-run.pid
exec .venv/bin/honcho -f deploy/dev/Procfile -d . start
