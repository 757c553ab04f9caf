"""The built-in scheduling policies, one module each.

``fifo``, ``fifo-strict``, ``te-priority``, ``preempt-random``,
``preempt-newest`` and ``fitgpp``: see docs/policies.md. ``rubick`` and the
baselines that keep the user's plan: see docs/rubick.md. The registry that
selects them by name is ``scheduler.core.policy``; the modules here do not
import it.
"""
