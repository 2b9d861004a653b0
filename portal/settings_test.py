"""Test settings: the same real services, with their own Redis database and cache prefix."""

import os

from django.core.exceptions import ImproperlyConfigured

from apps.infra.redisconf import redis_config_from_env
from portal.settings import *  # noqa: F403
from portal.settings import CACHES, REDIS, REDIS_URL, RUN_DIR, STORAGES

# Embedded services: tests use Redis database 1, so a running `make run` keeps its own state.
# Under pytest-xdist (`pytest -n N`) each worker has a database of its own, 10 + its number
# (gw0: 10 ... gw5: 15; 2, 3, 8 and 9 belong to the benches and test_install): the workers'
# test databases differ, and sharing Redis mixed their locks, caches, marks and Celery queues.
# The Celery workers the tests start inherit PYTEST_XDIST_WORKER, so they read the same one.
TEST_REDIS_DB = 1
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _XDIST_WORKER:
    if not (_XDIST_WORKER.startswith("gw") and _XDIST_WORKER[2:].isdigit()):
        raise ImproperlyConfigured(f"PYTEST_XDIST_WORKER={_XDIST_WORKER!r}: not gwN.")
    if int(_XDIST_WORKER[2:]) > 5:
        raise ImproperlyConfigured("pytest -n: at most 6 workers (Redis databases 10-15).")
    TEST_REDIS_DB = 10 + int(_XDIST_WORKER[2:])
if not REDIS.uses_sentinel:
    REDIS = redis_config_from_env(
        os.environ,
        default_url=f"unix://{RUN_DIR}/redis.sock?db={TEST_REDIS_DB}",
        default_broker_url=f"redis+socket://{RUN_DIR}/redis.sock?virtual_host={TEST_REDIS_DB}",
    )
    REDIS_URL = REDIS.describe()
    CELERY_BROKER_URL = REDIS.celery_broker_url()
    CELERY_REDBEAT_REDIS_URL = REDIS.redbeat_url()
CACHES["default"]["LOCATION"] = REDIS_URL
CACHES["default"]["KEY_PREFIX"] = "portal-test"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES["staticfiles"] = {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
# Network changes are recorded but start no firewall run, except in the pipeline tests
# (which switch it on and run a real worker).
PORTAL_FIREWALL_SYNC = False
# Tests without the lab must not open connections to the lab's addresses (they would leave
# through the machine's default route); the lab tests connect explicitly.
PORTAL_FIREWALL_WARM_CONNECT = False
# The second factor is off here as under `make run`; its own tests switch it on (the
# `staff_2fa` fixture), so that every other test logs staff in with the password alone.
PORTAL_REQUIRE_STAFF_2FA = False
