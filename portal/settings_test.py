"""Test settings: the same real services, with their own Redis database and cache prefix."""

import os

from apps.infra.redisconf import redis_config_from_env
from portal.settings import *  # noqa: F403
from portal.settings import CACHES, REDIS, REDIS_URL, RUN_DIR, STORAGES

# Embedded services: tests use Redis database 1, so a running `make run` keeps its own state.
if not REDIS.uses_sentinel:
    REDIS = redis_config_from_env(
        os.environ,
        default_url=f"unix://{RUN_DIR}/redis.sock?db=1",
        default_broker_url=f"redis+socket://{RUN_DIR}/redis.sock?virtual_host=1",
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
