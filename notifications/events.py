"""Which job events users can be notified of (pure: no database)."""

from __future__ import annotations

STARTED = "started"
PREEMPTED = "preempted"
REQUEUED = "requeued"
FINISHED = "finished"
FAILED = "failed"
IDLE_WARNING = "idle_warning"  # a TE job idle while others wait is warned before it is reclaimed

KINDS = (STARTED, PREEMPTED, REQUEUED, FINISHED, FAILED, IDLE_WARNING)
LABELS = {
    STARTED: "started running",
    PREEMPTED: "preempted",
    REQUEUED: "requeued",
    FINISHED: "finished (completed or cancelled)",
    FAILED: "failed or timed out",
    IDLE_WARNING: "idle warning (ended soon unless busy again)",
}
#: Nothing until the user chooses (like Slurm's --mail-type=NONE): a site without a mail server sends nothing.
DEFAULT_EMAIL_KINDS: tuple[str, ...] = ()


#: The JobEvent reason of idle reclaim's warning (scheduler.core.idle_reclaim.WARNING_REASON), a RUNNING -> RUNNING event.
IDLE_WARNING_REASON = "IdleWarning"


def kind_of(from_state: str, to_state: str, reason: str = "") -> str | None:
    """The notification kind of a transition ``from_state -> to_state``; None when it is not one.

    A job back in PENDING after it had run (preempted, its node lost) is
    requeued; the submission (no ``from_state``) is not an event to notify, nor is a
    waiting job held or released (``scheduler.holds``: PENDING to PENDING).
    """
    if reason == IDLE_WARNING_REASON:
        return IDLE_WARNING
    if to_state == "RUNNING":
        return STARTED
    if to_state == "PREEMPTING":
        return PREEMPTED
    if to_state == "PENDING" and from_state and from_state != "PENDING":
        return REQUEUED
    if to_state in ("COMPLETED", "CANCELLED"):
        return FINISHED
    if to_state in ("FAILED", "TIMEOUT"):
        return FAILED
    return None


def clean_kinds(values: object) -> list[str]:
    """``values`` as a list of known kinds in canonical order; ValueError naming an unknown one."""
    if not isinstance(values, (list, tuple)):
        raise ValueError("must be a list of event names")
    unknown = [v for v in values if v not in KINDS]
    if unknown:
        raise ValueError(f"unknown event {str(unknown[0])[:40]!r}; known: {', '.join(KINDS)}")
    return [k for k in KINDS if k in values]
