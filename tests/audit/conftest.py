"""The cluster's captured commands for the audit tests (the web fixtures are the test tree's plugin)."""

from __future__ import annotations

from tests.support.live_helpers import no_triggers, sent  # noqa: F401 - fixtures
