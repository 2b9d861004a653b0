#!/usr/bin/env bash
# The production install of one host, step by step as deploy/README.md ("One host") lists them.
# Run it as root from the checkout (/srv/portal); it stops after the first run so that you fill in
# /etc/portal/portal.env, and finishes when run again. Every step can run again (upgrades too).
#
# Paths and the user are variables, so tests run the same steps in a scratch prefix:
#   PORTAL_HOME (the checkout)   PORTAL_ETC (/etc/portal)   PORTAL_USER (portal)
#   SYSTEMD_DIR (/etc/systemd/system)   NGINX_SITE (/etc/nginx/sites-enabled/portal.conf)
#   PORTAL_SYSTEM=0: change nothing outside those paths (no apt, no adduser, no systemctl,
#   no nginx reload); what would be done is printed instead.
set -euo pipefail
PORTAL_HOME=${PORTAL_HOME:-$(cd "$(dirname "$0")/.." && pwd)}
PORTAL_ETC=${PORTAL_ETC:-/etc/portal}
PORTAL_USER=${PORTAL_USER:-portal}
SYSTEMD_DIR=${SYSTEMD_DIR:-/etc/systemd/system}
NGINX_SITE=${NGINX_SITE:-/etc/nginx/sites-enabled/portal.conf}
PORTAL_SYSTEM=${PORTAL_SYSTEM:-1}
PYTHON=${PYTHON:-/usr/bin/python3}
PACKAGES=(python3 python3-venv gettext nginx-light openssl systemd)
UNITS=(portal-web portal-worker portal-firewall portal-beat portal-mail)
ENV_FILE=$PORTAL_ETC/portal.env
PLACEHOLDER_KEY=change-me-to-a-long-random-string-of-at-least-fifty-characters

cd "$PORTAL_HOME"
# On a firewall host: only the host side (deploy/firewall/README.md), nothing of the portal.
if [[ ${1:-} == firewall ]]; then
  shift
  exec bash deploy/firewall/install.sh "$@"
fi
step() { printf '\n== %s (%s)\n' "$*" "$(date +%T)"; }
system() { [[ $PORTAL_SYSTEM == 1 ]]; }
if system && [[ $(id -u) -ne 0 ]]; then
  echo "Run this as root (it installs packages, adds the portal user and systemd units)." >&2
  exit 1
fi
if system; then owner=root; else owner=$(id -un); PORTAL_USER=$owner; fi
group=$(id -gn "$PORTAL_USER" 2>/dev/null || echo "$PORTAL_USER")
# The shipped files name /srv/portal, /etc/portal and the user portal: put in this install's.
localise() {
  sed -e "s#/srv/portal#$PORTAL_HOME#g" -e "s#/etc/portal#$PORTAL_ETC#g" \
    -e "s#^User=portal\$#User=$PORTAL_USER#" -e "s#^Group=portal\$#Group=$group#" "$1"
}
manage() { .venv/bin/python manage.py "$@"; }

step "1. Debian packages"
missing=()
for pkg in "${PACKAGES[@]}"; do
  [[ $(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null) == installed ]] || missing+=("$pkg")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  if ! system; then echo "missing Debian packages: ${missing[*]}" >&2; exit 1; fi
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

step "2. The portal user"
if system && ! id "$PORTAL_USER" >/dev/null 2>&1; then
  adduser --system --group --home "$PORTAL_HOME" --no-create-home "$PORTAL_USER"
  group=$PORTAL_USER
fi
echo "processes run as $PORTAL_USER:$group"

step "3. Directories: var/ (the portal's writable state) and $PORTAL_ETC"
install -d -m 0750 -o "$PORTAL_USER" -g "$group" "$PORTAL_HOME/var"
install -d -m 0750 -o "$owner" -g "$group" "$PORTAL_ETC"

step "4. Python environment: the production dependencies only (no test tools)"
[[ -x .venv/bin/python ]] || "$PYTHON" -m venv .venv
requirements=$(mktemp)
trap 'rm -f "$requirements"' EXIT
.venv/bin/python - >"$requirements" <<'PY'
import tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))
PY
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r "$requirements"

step "5. The environment file $ENV_FILE (never overwritten)"
if [[ ! -e $ENV_FILE ]]; then
  localise deploy/portal.env.example >"$ENV_FILE.new"
  chown "$owner:$group" "$ENV_FILE.new" && chmod 0640 "$ENV_FILE.new" && mv "$ENV_FILE.new" "$ENV_FILE"
fi
set -a
# shellcheck disable=SC1090
. "$ENV_FILE"
set +a

step "6. Translations (compilemessages: German)"
manage compilemessages --ignore=.venv --ignore=var -v0

step "7. Static files (collectstatic, served by nginx)"
manage collectstatic --no-input -v0

step "8. systemd units into $SYSTEMD_DIR"
install -d "$SYSTEMD_DIR"
installed=()
for unit in "${UNITS[@]}"; do
  localise "deploy/systemd/$unit.service" >"$SYSTEMD_DIR/$unit.service"
  installed+=("$SYSTEMD_DIR/$unit.service")
done
systemd-analyze verify "${installed[@]}"

step "9. The nginx site $NGINX_SITE (kept once it exists: server_name and certificates are yours)"
if [[ ! -e $NGINX_SITE ]]; then
  install -d "$(dirname "$NGINX_SITE")"
  localise deploy/nginx/portal.conf >"$NGINX_SITE"
fi

if grep -q "$PLACEHOLDER_KEY" "$ENV_FILE"; then
  echo
  echo "Now edit $ENV_FILE (SECRET_KEY, hosts, database, Redis, mail, firewall key)"
  echo "and the nginx site $NGINX_SITE (server_name, certificates), then run $0 again."
  exit 0
fi

step "10. Database: check --deploy, then migrate"
manage check --deploy --fail-level WARNING
manage migrate --no-input -v0

step "11. Start: the units and nginx"
if system; then
  systemctl daemon-reload
  systemctl enable --now "${UNITS[@]}"
  systemctl reload-or-restart "${UNITS[@]}"
  nginx -t && systemctl reload nginx
else
  echo "PORTAL_SYSTEM=0: not starting ${UNITS[*]} nor reloading nginx"
fi
echo "The portal is installed."
