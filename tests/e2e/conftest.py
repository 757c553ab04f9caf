"""The end-to-end tests' fixtures (``live``, ``e2e_worker``, ``e2e_redis_url``) come from the
live-stack plugin, ``tests/support/livestack.py``, registered for the whole test tree in
``tests/conftest.py``: defined once, so these tests and the browser tests share one worker.

Its helpers are re-exported here for the modules that import them from this file.
"""

from __future__ import annotations

from tests.support.livestack import (  # noqa: F401 - re-exported helpers, not fixtures
    HEARTBEAT,
    PY,
    REPO,
    TOKEN,
    TRAIN,
    WAIT,
    group_alive,
    job_groups,
    reference_digest,
    train_command,
    wait_until,
)
