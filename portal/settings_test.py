"""Settings for the test suite: the normal settings plus test-only values.

A key is supplied only when the environment gives none, scheduling cycles are
not enqueued on submit (tests that want them turn ``SCHEDULER_AUTORUN`` on),
and passwords hash fast.
"""

from __future__ import annotations

import os

os.environ.setdefault("SECRET_KEY", "test-only-secret-key-not-for-deployment")

from portal.settings import *  # noqa: E402,F401,F403

SCHEDULER_AUTORUN = False
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
