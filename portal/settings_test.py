"""Settings for the test suite: the normal settings plus test-only values.

A key is supplied only when the environment gives none, scheduling cycles are
not enqueued on submit (tests that want them turn ``SCHEDULER_AUTORUN`` on),
passwords hash fast, and the login rate limit counts in process memory so
that tests never share counters through Redis.
"""

from __future__ import annotations

import os

os.environ.setdefault("SECRET_KEY", "test-only-secret-key-not-for-deployment")

from portal.database import default_database  # noqa: E402
from portal.settings import *  # noqa: E402,F401,F403

# pytest-django holds the test process's connection in a transaction for as long as a test runs, so
# the session limit of every real process (portal/database.py) would end it in a long test: not here.
# The web server's wait for held rows is set by the tests that need it, on their own connection.
DATABASES = {"default": default_database(BASE_DIR / "var" / "db.sqlite3",  # noqa: F405
                                         {**os.environ, "DATABASE_IDLE_IN_TRANSACTION_S": "0",
                                          "DATABASE_LOCK_WAIT_S": "0"})}
SCHEDULER_AUTORUN = False
# Unit tests drive agent reports with the shared token or none; tests of the refusal turn this off.
GPUSCHED_AGENT_DEV_MODE = True
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "login-throttle": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "login-throttle"},
}
# Fair-share standings are computed for each request, so that tests never share them through Redis
# (tests/scheduler/test_fair_standing.py turns the cache on where it is under test).
FAIR_STANDING_CACHE_SECONDS = 0
# Each portal process reads the cluster for its pages: no test is served a cluster state stored in Redis
# by another (tests/portal/test_cluster_cache.py turns the sharing on where it is under test).
CLUSTER_STATE_SHARED = False
