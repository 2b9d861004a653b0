"""Settings, read from the environment.

Without DATABASE_URL / CELERY_BROKER_URL / REDIS_URL the portal uses the embedded development
services that `make services` runs under ./var (PostgreSQL and Redis on Unix sockets).
Production sets DEBUG=0, SECRET_KEY, ALLOWED_HOSTS, DATABASE_URL, CELERY_BROKER_URL, REDIS_URL
and the mail settings; `manage.py check --deploy` then reports nothing.
"""

from __future__ import annotations

import os
import secrets
from datetime import timedelta
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured
from django.utils.translation import gettext_lazy as _

from apps.infra.dburl import database_from_url
from apps.infra.errors import admins_parse, sentry_init
from apps.infra.logs import logging_config
from apps.infra.redisconf import RedisConfigError, redis_config_from_env

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("PORTAL_VAR_DIR", BASE_DIR / "var"))
RUN_DIR = VAR_DIR / "run"


def env_bool(name: str, default: bool) -> bool:
    """Read a boolean variable; refuse anything that is not clearly yes or no."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean: use 1/0, true/false, yes/no.")


def env_list(name: str, default: str) -> list[str]:
    """Read a comma-separated list."""
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def env_int(name: str, default: int) -> int:
    """Read an integer variable with a clear message when it is not one."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer.") from None


DEBUG = env_bool("DEBUG", default=True)


def _secret_key() -> str:
    key = os.environ.get("SECRET_KEY")
    if key:
        return key
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off.")
    # Development: a random key kept under ./var, so sessions survive restarts.
    path = VAR_DIR / "secret_key"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        key = secrets.token_urlsafe(50)
        path.write_text(key)
        path.chmod(0o600)
        return key


SECRET_KEY = _secret_key()
# 203.0.113.80: the portal as the lab's member side reaches it (lab.sh portal-proxy, the walled garden).
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1],203.0.113.80")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "apps.accounts.admin_apps.PortalAdminConfig",  # django.contrib.admin, second factor required
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django.contrib.postgres",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_filters",
    "django_htmx",
    "csp",
    "template_partials",
    "axes",
    "django_otp",
    "django_otp.plugins.otp_totp",
    "django_otp.plugins.otp_static",
    "apps.core",
    "apps.accounts",
    "apps.members",
    "apps.network",
    "apps.testaccess",
    "apps.audit",
    "apps.health",
    "apps.firewall",
    "apps.dhcp",
    "apps.tickets",
    "apps.abuse",
    "apps.notifications",
    "apps.traffic",
    "apps.alerts",  # Alertmanager's webhook: alerts open incidents (above tickets)
    "apps.operations",  # metrics, retention, demo data: reads every app above
]

MIDDLEWARE = [
    "apps.infra.logs.RequestIdMiddleware",  # a request id on every log line of the request
    "apps.operations.metrics.RequestLatencyMiddleware",  # portal_http_request_seconds per view
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",  # before the status page's fast path: its answers get it too
    # Answers warm /status/ requests before sessions, auth, CSRF and messages (apps.tickets).
    "apps.tickets.middleware.StatusPageMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "apps.core.middleware.NulByteRefusalMiddleware",  # a NUL in a query parameter: 400
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django_otp.middleware.OTPMiddleware",  # request.user.is_verified(): the second factor
    "apps.accounts.middleware.SecondFactorMiddleware",  # no page before the code when needed
    "apps.dhcp.walled.WalledGardenMiddleware",  # unregistered devices see one page
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "apps.core.htmx.HtmxLoginRedirectMiddleware",  # a lost session: one redirect, not 5 forms
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"
ASGI_APPLICATION = "portal.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "frontend" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "apps.accounts.context_processors.roles",
            ],
            # {% partialdef %} everywhere without {% load %}, as in Django 6; `|when`, the one
            # way a page writes a date and time (apps/core/localtime.py), on every page.
            "builtins": [
                "template_partials.templatetags.partials",
                "apps.core.templatetags.portal_time",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------------
_database_url = os.environ.get("DATABASE_URL", "")
if _database_url:
    try:
        _db = database_from_url(_database_url, conn_max_age=60)
    except ValueError as exc:
        raise ImproperlyConfigured(
            f"DATABASE_URL is not a valid database URL ({exc}); "
            "expected postgresql://USER:PASSWORD@HOST:PORT/NAME (or HOST1:PORT1,HOST2:PORT2 for a "
            "primary and its standbys)"
        ) from None
    if _db.get("ENGINE") != "django.db.backends.postgresql":
        raise ImproperlyConfigured(
            "DATABASE_URL must point at PostgreSQL (postgresql://...); the portal relies on its "
            "types and constraints."
        )
else:
    _db = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "portal",
        "USER": "portal",
        "HOST": str(RUN_DIR),
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
    }
_db.setdefault("OPTIONS", {}).setdefault("connect_timeout", 5)
DATABASES = {"default": _db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: cache, locks, heartbeats; Celery broker --------------------------------------------
# One server (REDIS_URL + CELERY_BROKER_URL) or Sentinel (REDIS_SENTINELS + REDIS_SENTINEL_MASTER):
# apps/infra/redisconf.py reads either, and every Redis user takes its connection from REDIS.
try:
    REDIS = redis_config_from_env(
        os.environ,
        default_url=f"unix://{RUN_DIR}/redis.sock?db=0",
        default_broker_url=f"redis+socket://{RUN_DIR}/redis.sock",
    )
except RedisConfigError as exc:
    raise ImproperlyConfigured(str(exc)) from None
REDIS_URL = REDIS.describe()  # for messages; connections come from apps.infra.redis
CACHES = {
    "default": {
        "BACKEND": "apps.infra.redis.PortalRedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": os.environ.get("CACHE_KEY_PREFIX", "portal"),
    }
}

CELERY_BROKER_URL = REDIS.celery_broker_url()
# With Sentinel, a publish returns once a replica holds the task (apps/infra/broker.py).
CELERY_BROKER_TRANSPORT = REDIS.celery_broker_transport()
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None  # a worker waits for its broker (retries every 5 s)
CELERY_WORKER_CONSUMER = "apps.infra.celery:PortalConsumer"  # reconnects quickly after a failover
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": 3600,
    "socket_connect_timeout": 2,
    **REDIS.celery_transport_options(),
}
# With Sentinel, a publish during a failover waits for the new primary instead of failing.
CELERY_TASK_PUBLISH_RETRY_POLICY = REDIS.celery_publish_retry_policy()
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Tasks with a countdown run within 0.1 s of it (Celery's default timer sleeps up to 1 s).
CELERY_WORKER_TIMER_PRECISION = 0.1
CELERY_TASK_IGNORE_RESULT = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False  # LOGGING below formats Celery's lines too
CELERY_TIMEZONE = "UTC"
# Firewall work has a queue of its own, served by one worker process (threads: one warm snapshot
# cache for every push, sites in parallel); everything else stays on the default queue.
CELERY_TASK_DEFAULT_QUEUE = "celery"
CELERY_TASK_ROUTES = {
    "workers.firewall.*": {"queue": "firewall"},
    "workers.health.firewall_health_collect": {"queue": "firewall"},
    "workers.dhcp.dhcp_leases_collect": {"queue": "firewall"},  # SSH to the hosts
}
PORTAL_HEARTBEAT_INTERVAL = env_int("PORTAL_HEARTBEAT_INTERVAL", 15)
# Beat on two hosts, one active (apps.infra.celery.PortalScheduler, celery-redbeat): the active beat
# holds a lock in Redis and renews it at every tick; another beat waits for it and takes over at
# most PORTAL_BEAT_LOCK_TIMEOUT + one tick after the active one died. The schedule's last runs
# live in Redis too, so the one taking over neither repeats nor skips an interval.
PORTAL_BEAT_LOCK_TIMEOUT = env_int("PORTAL_BEAT_LOCK_TIMEOUT", 25)
if PORTAL_BEAT_LOCK_TIMEOUT < 3:
    raise ImproperlyConfigured("PORTAL_BEAT_LOCK_TIMEOUT must be at least 3 (seconds).")
if REDIS.wait_timeout_ms > PORTAL_BEAT_LOCK_TIMEOUT * 500:
    # A publish waiting that long for a missing replica would let beat's lock expire.
    raise ImproperlyConfigured(
        "REDIS_WAIT_TIMEOUT_MS must be at most half of PORTAL_BEAT_LOCK_TIMEOUT "
        f"({PORTAL_BEAT_LOCK_TIMEOUT * 500} ms)."
    )
# Beat ticks (renews its lock, marks itself alive) at least this often: thrice per lock timeout.
CELERY_BEAT_MAX_LOOP_INTERVAL = min(5, PORTAL_BEAT_LOCK_TIMEOUT // 3)
CELERY_REDBEAT_REDIS_URL = REDIS.redbeat_url()
CELERY_REDBEAT_REDIS_OPTIONS = REDIS.redbeat_options()
CELERY_REDBEAT_KEY_PREFIX = "portal:beat:"
CELERY_REDBEAT_LOCK_TIMEOUT = PORTAL_BEAT_LOCK_TIMEOUT
CELERY_BEAT_SCHEDULE = {
    "heartbeat": {
        "task": "workers.health.heartbeat",
        "schedule": timedelta(seconds=PORTAL_HEARTBEAT_INTERVAL),
        "options": {"expires": PORTAL_HEARTBEAT_INTERVAL},
    },
}

# Reverse proxies whose X-Forwarded-For is believed (apps/core/clientip.py); networks.
PORTAL_TRUSTED_PROXIES = env_list("PORTAL_TRUSTED_PROXIES", "127.0.0.1/32,::1/128")

# /metrics: from these networks, or with "Authorization: Bearer PORTAL_METRICS_TOKEN".
PORTAL_METRICS_NETWORKS = env_list("PORTAL_METRICS_NETWORKS", "127.0.0.1/32,::1/128")
PORTAL_METRICS_TOKEN = os.environ.get("PORTAL_METRICS_TOKEN", "")

# --- Firewalls ------------------------------------------------------------------------------
PORTAL_FIREWALL_SSH_KEY = os.environ.get(
    "PORTAL_FIREWALL_SSH_KEY", str(VAR_DIR / "lab" / "portal_ed25519")
)
PORTAL_FIREWALL_KNOWN_HOSTS = os.environ.get(
    "PORTAL_FIREWALL_KNOWN_HOSTS", str(VAR_DIR / "lab" / "known_hosts")
)
PORTAL_FIREWALL_CONFIRM_WITHIN = env_int("PORTAL_FIREWALL_CONFIRM_WITHIN", 30)
# Never filtered (the compiler accepts them first); the lab's management net by default.
PORTAL_MANAGEMENT_NETWORKS = env_list("PORTAL_MANAGEMENT_NETWORKS", "10.255.255.0/28")
# A change that arrives while its site's run holds the lock: its run starts this many seconds
# later (0: at once, and it waits for the lock, polling every 50 ms; either way it carries every
# change recorded until it takes them). 0.3 s plus Celery's timer granularity cost each change
# made right after the previous one went live about a second.
PORTAL_FIREWALL_DEBOUNCE = float(os.environ.get("PORTAL_FIREWALL_DEBOUNCE", "0"))
# The firewall worker's warm-up at start also opens its SSH connections to the hosts (kept open
# for the first rollout: apps.firewall.transport.ConnectionPool).
PORTAL_FIREWALL_WARM_CONNECT = True
# The firewall queue's worker takes its first task only after its warm-up (read, compile every
# host, connect), at most this long: a change that came meanwhile waits for it instead of
# compiling cold beside it (both then took ~8 s at 20,000 members on 2 cores).
PORTAL_FIREWALL_WARM_WAIT = float(os.environ.get("PORTAL_FIREWALL_WARM_WAIT", "60"))
# A member-only change (device, forward, opening, member row) takes the delta path: the worker
# steps each host's delta base (workers/ruleset/delta.py) and pushes the increment; the full
# compile runs at warm-up, on reconcile, after a refused or failed push and for anything else
# (docs/ruleset.md, "Delta compile", "Wired into the site run").
PORTAL_FIREWALL_DELTA = env_bool("PORTAL_FIREWALL_DELTA", default=True)
# A site's lock expires this long after its holder died (the holder renews it every third).
PORTAL_FIREWALL_LOCK_TTL = env_int("PORTAL_FIREWALL_LOCK_TTL", 20)
PORTAL_FIREWALL_SYNC = env_bool("PORTAL_FIREWALL_SYNC", default=True)  # network changes -> push
# The health beat compiles a site whose last run is older than this (seconds; 0: never), so a
# change whose record was lost with Redis reaches the hosts anyway; unchanged hosts are skipped.
PORTAL_FIREWALL_RECONCILE_INTERVAL = env_int("PORTAL_FIREWALL_RECONCILE_INTERVAL", 300)
PORTAL_RULESET_HISTORY = env_int("PORTAL_RULESET_HISTORY", 50)
PORTAL_HEALTH_CONNTRACK_MAX_RATIO = 0.8  # a push whose host is fuller than this rolls back
PORTAL_HEALTH_CONNTRACK_WARN = 0.8
PORTAL_HEALTH_SOFTIRQ_WARN = 0.5
PORTAL_HEALTH_INTERVAL = env_int("PORTAL_HEALTH_INTERVAL", 30)
PORTAL_HEALTH_SAMPLES_KEPT = env_int("PORTAL_HEALTH_SAMPLES_KEPT", 2880)  # a day at 30 s
# How often the health beat also reads each host's content digest back (drift by content); raise
# it on very large hosts (docs/bundle.md has the cost).
PORTAL_HEALTH_DIGEST_INTERVAL = env_int("PORTAL_HEALTH_DIGEST_INTERVAL", 25)
# DHCP: how often the hosts' leases are read back (the walled garden's MAC lookup and the
# devices' "got 10.100.1.9 from pl-nat1" use them).
PORTAL_DHCP_LEASE_INTERVAL = env_int("PORTAL_DHCP_LEASE_INTERVAL", 15)
CELERY_BEAT_SCHEDULE["dhcp-leases"] = {
    "task": "workers.dhcp.dhcp_leases_collect",
    "schedule": timedelta(seconds=PORTAL_DHCP_LEASE_INTERVAL),
    "options": {"expires": PORTAL_DHCP_LEASE_INTERVAL},
}
CELERY_BEAT_SCHEDULE["firewall-health"] = {
    "task": "workers.health.firewall_health_collect",
    "schedule": timedelta(seconds=PORTAL_HEALTH_INTERVAL),
    "options": {"expires": PORTAL_HEALTH_INTERVAL},
}
# Alertmanager's webhook (apps/alerts): the shared secret it sends as a bearer token (empty:
# every call is refused), and how long a resolved alert group waits before it says "working
# again" (a flap inside this time opens nothing and posts nothing).
PORTAL_ALERTS_WEBHOOK_SECRET = os.environ.get("PORTAL_ALERTS_WEBHOOK_SECRET", "")
PORTAL_ALERTS_HOLD_DOWN_SECONDS = env_int("PORTAL_ALERTS_HOLD_DOWN_SECONDS", 300)
CELERY_BEAT_SCHEDULE["alerts-settle"] = {
    "task": "workers.alerts.alert_groups_settle",
    "schedule": timedelta(seconds=60),
    "options": {"expires": 60},
}
# The off-site status page (apps/tickets/publish.py, deploy/README.md): "" (off), a directory,
# user@host:/path reached with rsync over SSH (key, known_hosts and port below), or
# s3://bucket/prefix in an S3-compatible store (endpoint, region, keys and addressing below; empty
# keys: boto3's own credential chain).
PORTAL_STATUS_PUBLISH_TARGET = os.environ.get("PORTAL_STATUS_PUBLISH_TARGET", "")
PORTAL_STATUS_PUBLISH_SSH_KEY = os.environ.get("PORTAL_STATUS_PUBLISH_SSH_KEY", "")
PORTAL_STATUS_PUBLISH_KNOWN_HOSTS = os.environ.get("PORTAL_STATUS_PUBLISH_KNOWN_HOSTS", "")
PORTAL_STATUS_PUBLISH_SSH_PORT = env_int("PORTAL_STATUS_PUBLISH_SSH_PORT", 0)
PORTAL_STATUS_PUBLISH_S3_ENDPOINT = os.environ.get("PORTAL_STATUS_PUBLISH_S3_ENDPOINT", "")
PORTAL_STATUS_PUBLISH_S3_REGION = os.environ.get("PORTAL_STATUS_PUBLISH_S3_REGION", "us-east-1")
PORTAL_STATUS_PUBLISH_S3_ACCESS_KEY = os.environ.get("PORTAL_STATUS_PUBLISH_S3_ACCESS_KEY", "")
PORTAL_STATUS_PUBLISH_S3_SECRET_KEY = os.environ.get("PORTAL_STATUS_PUBLISH_S3_SECRET_KEY", "")
# "path" (https://endpoint/bucket/key: what most S3-compatible stores expect) or "virtual".
PORTAL_STATUS_PUBLISH_S3_ADDRESSING = os.environ.get("PORTAL_STATUS_PUBLISH_S3_ADDRESSING", "path")
if PORTAL_STATUS_PUBLISH_S3_ADDRESSING not in ("path", "virtual"):
    raise ImproperlyConfigured("PORTAL_STATUS_PUBLISH_S3_ADDRESSING must be path or virtual.")
if PORTAL_STATUS_PUBLISH_TARGET:  # the backstop: the page's "as of" time never gets old
    CELERY_BEAT_SCHEDULE["status-publish"] = {
        "task": "workers.status.status_publish",
        "schedule": timedelta(minutes=5),
        "options": {"expires": 300},
    }
# Test accesses: notices N days before the end (NetworkSettings), expiry after the last day.
CELERY_BEAT_SCHEDULE["test-access-expire"] = {
    "task": "workers.network.expire_test_accesses",
    "schedule": timedelta(minutes=env_int("PORTAL_TEST_ACCESS_INTERVAL_MINUTES", 60)),
    "options": {"expires": 600},
}

# Abuse lookup: ended address holdings (who held which address when) are kept this many days,
# then pruned daily; running ones are never pruned.
PORTAL_ABUSE_HISTORY_DAYS = env_int("PORTAL_ABUSE_HISTORY_DAYS", 180)
# Retention (apps/operations/retention.py, docs/retention.md): one daily task bounds every table that
# grows with time, the abuse history above included; days each.
PORTAL_RETAIN_PUSH_LOG_DAYS = env_int("PORTAL_RETAIN_PUSH_LOG_DAYS", 90)
PORTAL_RETAIN_HEALTH_DAYS = env_int("PORTAL_RETAIN_HEALTH_DAYS", 14)
PORTAL_RETAIN_INBOUND_MAIL_DAYS = env_int("PORTAL_RETAIN_INBOUND_MAIL_DAYS", 30)
PORTAL_RETAIN_QUARANTINED_MAIL_DAYS = env_int("PORTAL_RETAIN_QUARANTINED_MAIL_DAYS", 90)
PORTAL_RETAIN_AUDIT_DAYS = env_int("PORTAL_RETAIN_AUDIT_DAYS", 730)
PORTAL_RETAIN_NOTICES_DAYS = env_int("PORTAL_RETAIN_NOTICES_DAYS", 365)
PORTAL_RETAIN_TICKETS_DAYS = env_int("PORTAL_RETAIN_TICKETS_DAYS", 730)
PORTAL_RETAIN_LOGIN_LOG_DAYS = env_int("PORTAL_RETAIN_LOGIN_LOG_DAYS", 90)
# A former member's personal data is erased this long after the membership ended
# (apps/members/privacy.py); the abuse history keeps its rows for PORTAL_ABUSE_HISTORY_DAYS.
PORTAL_RETAIN_FORMER_MEMBERS_DAYS = env_int("PORTAL_RETAIN_FORMER_MEMBERS_DAYS", 180)
CELERY_BEAT_SCHEDULE["retention"] = {
    "task": "workers.retention.retention_run",
    "schedule": timedelta(hours=env_int("PORTAL_RETENTION_INTERVAL_HOURS", 24)),
    "options": {"expires": 3600},
}
# Notifications: at most one mail per member and kind in this many seconds (what comes in
# meanwhile goes out together in the next one); a flush waits this long after a notice so that
# a burst goes out as one mail; beat flushes and checks live states this often.
PORTAL_NOTIFICATIONS_MAIL_INTERVAL = env_int("PORTAL_NOTIFICATIONS_MAIL_INTERVAL", 3600)
PORTAL_NOTIFICATIONS_GATHER_SECONDS = env_int("PORTAL_NOTIFICATIONS_GATHER_SECONDS", 10)
PORTAL_NOTIFICATIONS_FLUSH_INTERVAL = env_int("PORTAL_NOTIFICATIONS_FLUSH_INTERVAL", 60)
# A change is "live late" when the firewalls enforce it later than this after it was made; a
# change still pending after the window is no longer looked at.
PORTAL_NOTIFICATIONS_LIVE_LATE_SECONDS = env_int("PORTAL_NOTIFICATIONS_LIVE_LATE_SECONDS", 60)
PORTAL_NOTIFICATIONS_LIVE_WINDOW_SECONDS = env_int(
    "PORTAL_NOTIFICATIONS_LIVE_WINDOW_SECONDS", 21600
)
PORTAL_NOTIFICATIONS_LIVE_INTERVAL = env_int("PORTAL_NOTIFICATIONS_LIVE_INTERVAL", 30)
# Where members reach the portal (links in mails).
PORTAL_URL = os.environ.get("PORTAL_URL", "http://127.0.0.1:8000")
CELERY_BEAT_SCHEDULE["notices-mail"] = {
    "task": "workers.notifications.notices_mail_flush",
    "schedule": timedelta(seconds=PORTAL_NOTIFICATIONS_FLUSH_INTERVAL),
    "options": {"expires": PORTAL_NOTIFICATIONS_FLUSH_INTERVAL},
}
CELERY_BEAT_SCHEDULE["notices-live"] = {
    "task": "workers.notifications.live_checks_run",
    "schedule": timedelta(seconds=PORTAL_NOTIFICATIONS_LIVE_INTERVAL),
    "options": {"expires": PORTAL_NOTIFICATIONS_LIVE_INTERVAL},
}

# --- Authentication -------------------------------------------------------------------------
AUTHENTICATION_BACKENDS = [
    # Per account, from all clients together (PORTAL_THROTTLE_RATES["login_account"]); then
    # per account and client (axes: AXES_FAILURE_LIMIT).
    "apps.accounts.throttle.AccountFailureCapBackend",
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# Argon2id first (apps/accounts/hashers.py: why these parameters); the others only read
# existing hashes, which are rewritten with the first at the next login.
PASSWORD_HASHERS = [
    "apps.accounts.hashers.PortalArgon2PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2SHA1PasswordHasher",
    "django.contrib.auth.hashers.ScryptPasswordHasher",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"
AXES_FAILURE_LIMIT = env_int("AXES_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=15)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_RESET_ON_SUCCESS = True
# The lockout and the sign-up limits count per real client, behind the trusted proxies
# (PORTAL_TRUSTED_PROXIES), not per nginx; an IPv6 client by its /64.
AXES_CLIENT_IP_CALLABLE = "apps.core.clientip.client_key"

# Second factor (TOTP with recovery codes, django-otp; docs/two-factor.md). Required for staff
# roles (volunteer, support, admin) and Django staff when on: on in production, off under
# DEBUG so that the demo logins of `make run` stay one step. Members may always opt in.
PORTAL_REQUIRE_STAFF_2FA = env_bool("PORTAL_REQUIRE_STAFF_2FA", default=not DEBUG)
# Wrong codes in a row (TOTP or recovery) that lock the second step, and for how long.
PORTAL_2FA_FAILURE_LIMIT = env_int("PORTAL_2FA_FAILURE_LIMIT", 5)
PORTAL_2FA_LOCKOUT_MINUTES = env_int("PORTAL_2FA_LOCKOUT_MINUTES", 15)
PORTAL_2FA_RECOVERY_CODES = 10
OTP_TOTP_ISSUER = os.environ.get("PORTAL_2FA_ISSUER", "Network portal")
# The lockout above is the one rule; django-otp's own growing delay after each wrong code would
# refuse the right code typed right after a typo.
OTP_TOTP_THROTTLE_FACTOR = 0
OTP_STATIC_THROTTLE_FACTOR = 0

# --- Mail -----------------------------------------------------------------------------------
EMAIL_HOST = os.environ.get("EMAIL_HOST", "")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", default=False)
EMAIL_TIMEOUT = 10
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "Network portal <noreply@localhost>")
SERVER_EMAIL = DEFAULT_FROM_EMAIL
EMAIL_BACKEND = os.environ.get(
    "EMAIL_BACKEND",
    "django.core.mail.backends.smtp.EmailBackend"
    if EMAIL_HOST
    else "django.core.mail.backends.console.EmailBackend",
)

# --- Tickets: inbound mail (SMTP listener, IMAP), outbound replies --------------------------
PORTAL_SMTP_HOST = os.environ.get("PORTAL_SMTP_HOST", "127.0.0.1")
PORTAL_SMTP_PORT = env_int("PORTAL_SMTP_PORT", 2525)
PORTAL_MAIL_MAX_BYTES = env_int("PORTAL_MAIL_MAX_BYTES", 25 * 1024 * 1024)
PORTAL_TICKET_ATTACHMENT_MAX_BYTES = env_int("PORTAL_TICKET_ATTACHMENT_MAX_BYTES", 5 * 1024 * 1024)
PORTAL_TICKET_ADDRESS = os.environ.get("PORTAL_TICKET_ADDRESS", "support@localhost")
PORTAL_TICKET_FROM_NAME = os.environ.get("PORTAL_TICKET_FROM_NAME", "Network support")
PORTAL_MAIL_DOMAIN = os.environ.get("PORTAL_MAIL_DOMAIN", "portal.localhost")
PORTAL_TICKET_ACKNOWLEDGE = env_bool("PORTAL_TICKET_ACKNOWLEDGE", default=True)
PORTAL_TICKET_ACK_PER_HOUR = env_int("PORTAL_TICKET_ACK_PER_HOUR", 5)
# The authserv-ids (RFC 8601) of our own receiving mail servers, whose Authentication-Results
# headers are believed: mail from a member's address that passed DMARC or aligned SPF there is
# theirs. Empty: no header is believed, and only a ticket's own reference threads a mail.
PORTAL_MAIL_TRUSTED_AUTHSERV_IDS = env_list("PORTAL_MAIL_TRUSTED_AUTHSERV_IDS", "")
# Without such a header the listener verifies DKIM itself (dkimpy, the signer's key from DNS):
# a valid signature whose domain is the From address's (or a parent of it) makes the address
# the sender's. Off: only a trusted Authentication-Results does.
PORTAL_MAIL_VERIFY_DKIM = env_bool("PORTAL_MAIL_VERIFY_DKIM", default=True)
PORTAL_IMAP_HOST = os.environ.get("PORTAL_IMAP_HOST", "")
PORTAL_IMAP_PORT = env_int("PORTAL_IMAP_PORT", 993)
PORTAL_IMAP_SSL = env_bool("PORTAL_IMAP_SSL", default=True)
PORTAL_IMAP_USER = os.environ.get("PORTAL_IMAP_USER", "")
PORTAL_IMAP_PASSWORD = os.environ.get("PORTAL_IMAP_PASSWORD", "")
PORTAL_IMAP_MAILBOX = os.environ.get("PORTAL_IMAP_MAILBOX", "INBOX")
# Where fetched mail is moved after it is stored (empty: it stays in the mailbox, marked read).
PORTAL_IMAP_DONE_MAILBOX = os.environ.get("PORTAL_IMAP_DONE_MAILBOX", "")
PORTAL_IMAP_INTERVAL = env_int("PORTAL_IMAP_INTERVAL", 60)
if PORTAL_IMAP_HOST:
    CELERY_BEAT_SCHEDULE["mail-imap-poll"] = {
        "task": "workers.mail.imap_poll",
        "schedule": timedelta(seconds=PORTAL_IMAP_INTERVAL),
        "options": {"expires": PORTAL_IMAP_INTERVAL},
    }

# --- Internationalisation -------------------------------------------------------------------
LANGUAGE_CODE = "en"
LANGUAGES = [("en", _("English")), ("de", _("German"))]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = os.environ.get("TIME_ZONE", "Europe/Berlin")
USE_I18N = True
USE_TZ = True

# --- Static files ---------------------------------------------------------------------------
STATIC_URL = "static/"
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", BASE_DIR / "staticfiles"))
WHITENOISE_USE_FINDERS = DEBUG
if DEBUG:
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise warns about a missing root
STATICFILES_DIRS = [BASE_DIR / "frontend" / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# --- API ------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Token first: unauthenticated API calls then answer 401 with WWW-Authenticate.
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": ["apps.core.api.StrictFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # Redis-backed (apps/accounts/throttle.py): 429 with Retry-After past PORTAL_THROTTLE_RATES.
    "DEFAULT_THROTTLE_CLASSES": ["apps.accounts.throttle.TokenRateThrottle"],
}
# Rate limits, "N/s|m|h|d" (fixed windows in Redis): every API request per token (or session
# user); tickets a member opens (API and page); password-reset mails per address and per client.
PORTAL_THROTTLE_RATES = {
    "api": os.environ.get("PORTAL_THROTTLE_API", "1000/m"),
    "ticket_create": os.environ.get("PORTAL_THROTTLE_TICKET_CREATE", "10/h"),
    "password_reset_address": os.environ.get("PORTAL_THROTTLE_RESET_ADDRESS", "3/h"),
    "password_reset_client": os.environ.get("PORTAL_THROTTLE_RESET_CLIENT", "10/h"),
    # Failed sign-ins of one account from all clients together; past it the account refuses
    # every sign-in until the window ends (the price: someone spending this many guesses can
    # keep one account locked for an hour; a password reset by mail still works).
    "login_account": os.environ.get("PORTAL_THROTTLE_LOGIN_ACCOUNT", "30/h"),
    # Abuse lookups per user (page and API together; the manage.py command is not limited).
    "abuse_lookup": os.environ.get("PORTAL_THROTTLE_ABUSE_LOOKUP", "120/h"),
    # The captive-portal API (RFC 8908), anonymous: per client address. An OS asks it a few
    # times per network join; a loop of one device is cut off, the others keep their answers.
    "captive_api": os.environ.get("PORTAL_THROTTLE_CAPTIVE_API", "60/m"),
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Network portal API",
    "DESCRIPTION": "Members, devices, port forwards and the firewalls of a dormitory network.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
}
SPECTACULAR_SETTINGS.setdefault("ENUM_NAME_OVERRIDES", {})["TicketStatusEnum"] = (
    "apps.tickets.choices.TicketStatus"
)
SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"]["MemberStatusEnum"] = (
    "apps.members.choices.MemberStatus"
)

# --- Security (production: DEBUG=0) ---------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if not DEBUG:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", default=True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", default=True)

# Content-Security-Policy (django-csp): the portal's own scripts and styles only; no inline code,
# no eval (htmx's config in base.html turns off its injected style and eval). The API docs page
# has its own policy for Swagger UI (portal/api_urls.py). Nothing from another origin.
from csp.constants import NONE, SELF  # noqa: E402

CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],  # Pico's icons (select arrow, checkbox) are data: SVGs
        "font-src": [SELF],
        "connect-src": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
        "object-src": [NONE],
        "base-uri": [SELF],
    },
}
# --- Errors reach a person (apps/infra/errors.py) -------------------------------------------------
# Each 500 and each failed task is mailed to ADMINS ("Name <address>, address", comma separated)
# and, with SENTRY_DSN, reported to a Sentry-compatible tracker.
ADMINS = admins_parse(os.environ.get("ADMINS", ""))
SENTRY_DSN = os.environ.get("SENTRY_DSN", "")
sentry_init(
    dsn=SENTRY_DSN,
    environment=os.environ.get("SENTRY_ENVIRONMENT", "production"),
    release=os.environ.get("SENTRY_RELEASE", ""),
)

# One format for web, workers, beat and the mail listener (apps/infra/logs.py): JSON lines in
# production, a console line in development; LOG_FORMAT=json|console, LOG_LEVEL.
LOGGING = logging_config(
    json=os.environ.get("LOG_FORMAT", "console" if DEBUG else "json") == "json",
    level=os.environ.get("LOG_LEVEL", "INFO"),
)

# Traffic per member (apps/traffic, docs/traffic.md): read every N seconds into hourly buckets,
# rolled up to days after PORTAL_TRAFFIC_HOURLY_DAYS, deleted after PORTAL_TRAFFIC_KEEP_DAYS.
PORTAL_TRAFFIC_INTERVAL = env_int("PORTAL_TRAFFIC_INTERVAL", 300)
PORTAL_TRAFFIC_HOURLY_DAYS = env_int("PORTAL_TRAFFIC_HOURLY_DAYS", 7)
PORTAL_TRAFFIC_KEEP_DAYS = env_int("PORTAL_TRAFFIC_KEEP_DAYS", 90)
CELERY_BEAT_SCHEDULE["traffic-collect"] = {
    "task": "workers.traffic.traffic_collect",
    "schedule": timedelta(seconds=PORTAL_TRAFFIC_INTERVAL),
    "options": {"expires": PORTAL_TRAFFIC_INTERVAL},
}
CELERY_BEAT_SCHEDULE["traffic-rollup"] = {
    "task": "workers.traffic.traffic_rollup",
    "schedule": timedelta(hours=1),
    "options": {"expires": 3600},
}
