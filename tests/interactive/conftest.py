from tests.support.live_helpers import no_triggers, sent  # noqa: F401 - fixtures
