"""System checks: settings the scheduler depends on are usable."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, Warning, register


@register()
def check_policy_setting(app_configs, **kwargs):  # noqa: ANN001 - Django's check signature
    """SCHEDULER_POLICY names a registered policy, and one that can serve a live cluster."""
    from scheduler.core.policy import policy_names, simulator_only

    try:
        names = policy_names()
    except ImportError as exc:
        return [Warning(f"scheduling policies cannot be loaded ({exc}); SCHEDULER_POLICY not checked", id="scheduler.W001")]
    if not names:  # the policy modules are not written or not importable yet
        return [Warning("no scheduling policy is registered; SCHEDULER_POLICY not checked", id="scheduler.W002")]
    if settings.SCHEDULER_POLICY not in names:
        return [
            Error(
                f"SCHEDULER_POLICY={settings.SCHEDULER_POLICY!r} is not a registered policy",
                hint=f"known policies: {', '.join(names)}",
                id="scheduler.E001",
            )
        ]
    why = simulator_only(settings.SCHEDULER_POLICY)
    if why:
        return [Warning(f"SCHEDULER_POLICY={settings.SCHEDULER_POLICY!r} is a simulator policy: {why}",
                        hint="for adaptive jobs on a live cluster use pollux", id="scheduler.W003")]
    return []
