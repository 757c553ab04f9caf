"""Jobs, attempts, the state timeline and quotas.

State names follow Slurm. A job moves::

    PENDING -> STARTING -> RUNNING -> COMPLETED | FAILED | TIMEOUT
                 RUNNING -> PREEMPTING -> PENDING (next attempt)
                 RUNNING -> NODE_LOST -> PENDING (next attempt)
    any live state -> CANCELLING -> CANCELLED  (PENDING goes straight to CANCELLED)

Every transition writes one ``JobEvent``; every run on GPUs is one ``Attempt``. Writers that may race
(the scheduling loop, agent reports, cancellation) change ``Job.state`` with conditional updates
(``filter(pk=..., state=old).update(state=new)``) and act only when one row changed (``scheduler.transitions``).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from scheduler.gpu_allocation import gpu_count

# Hard bounds on a request, whatever the quotas say.
MAX_GPUS_PER_JOB = 64
MAX_CPUS_PER_JOB = 4096
MAX_MEM_GB_PER_JOB = 65536
MAX_GRACE_PERIOD_S = 24 * 3600
MAX_TIME_LIMIT_S = 365 * 24 * 3600
PRIORITY_RANGE = (-1000, 1000)
MAX_NAME_LENGTH = 200
MAX_COMMAND_LENGTH = 16 * 1024
DEFAULT_GRACE_PERIOD_S = 30
#: Longest ``JobEvent.message`` and ``Job.pending_message``; writers cut longer texts (scheduler.transitions).
MESSAGE_LENGTH = 500


class JobClassChoice(models.TextChoices):
    """Trial-and-error (interactive, starts fast) or best-effort (preemptible)."""

    TE = "TE", "trial-and-error"
    BE = "BE", "best-effort"


class JobState(models.TextChoices):
    PENDING = "PENDING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    PREEMPTING = "PREEMPTING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLING = "CANCELLING"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    NODE_LOST = "NODE_LOST"


#: States in which a job holds GPUs (its current attempt has not vacated).
ACTIVE_STATES = frozenset(
    {JobState.STARTING, JobState.RUNNING, JobState.PREEMPTING, JobState.CANCELLING}
)
#: States a job never leaves.
TERMINAL_STATES = frozenset(
    {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT}
)
#: States a job may still leave (waiting, holding GPUs, or lost and awaiting requeue).
LIVE_STATES = frozenset(set(JobState) - TERMINAL_STATES)


class PendingReason(models.TextChoices):
    """Why a PENDING job waits; the core's ``Reason`` codes use the same strings."""

    NONE = "", "-"
    RESOURCES = "Resources"
    PRIORITY = "Priority"
    QUOTA_EXCEEDED = "QuotaExceeded"
    WAITING_FOR_PREEMPTION = "WaitingForPreemption"
    RESERVATION = "Reservation"
    RECONFIGURED = "Reconfigured"
    PREEMPTED = "Preempted"
    NODE_LOST = "NodeLost"
    IMAGE_UNAVAILABLE = "ImageUnavailable"
    DEPENDENCY = "Dependency"
    JOB_HELD_USER = "JobHeldUser"
    JOB_HELD_ADMIN = "JobHeldAdmin"


class JobHold(models.TextChoices):
    """Who keeps a PENDING job from starting (``scheduler.holds``): its owner, or an administrator."""

    NONE = "", "-"
    USER = "user"
    ADMIN = "admin"


class Job(models.Model):
    """A user's request to run a command on GPUs, and where it stands."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs", db_index=False)
    name = models.CharField(max_length=MAX_NAME_LENGTH)
    command = models.TextField()
    job_class = models.CharField(max_length=2, choices=JobClassChoice.choices, default=JobClassChoice.BE)
    num_gpus = models.PositiveIntegerField()
    num_cpus = models.FloatField(default=0.0)
    mem_gb = models.FloatField(default=0.0)
    grace_period = models.PositiveIntegerField(
        default=DEFAULT_GRACE_PERIOD_S, help_text="Seconds between the preemption notice (SIGTERM) and SIGKILL."
    )
    time_limit = models.PositiveIntegerField(null=True, blank=True, help_text="Seconds of run time per attempt; empty: no limit.")
    priority = models.IntegerField(default=0)
    hold = models.CharField(max_length=5, choices=JobHold.choices, blank=True, default="")

    state = models.CharField(max_length=12, choices=JobState.choices, default=JobState.PENDING)
    pending_reason = models.CharField(max_length=32, blank=True, default="")
    pending_message = models.CharField(max_length=MESSAGE_LENGTH, blank=True, default="")

    submitted_at = models.DateTimeField(default=timezone.now)
    first_started_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True, help_text="Start of the current attempt.")
    ended_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)

    attempt_count = models.PositiveIntegerField(default=0)
    preemption_count = models.PositiveIntegerField(default=0)
    progress_seconds = models.FloatField(
        default=0.0, help_text="Seconds of useful (kept) work across attempts, for the scheduler."
    )

    # Reconfigurable jobs (docs/rubick.md, docs/live_cluster.md): with ``model`` (the performance model's catalog) a
    # policy may change the plan among ``allowed_plans`` and the GPUs within [min_gpus, max_gpus]; with
    # ``adaptive_app`` (an application profile, scheduler.adaptive_jobs) the GPUs within [1, max_gpus] and the batch.
    adaptive_app = models.CharField(max_length=32, blank=True, default="", help_text="Adaptive (Pollux) profile.")
    model = models.CharField(max_length=32, blank=True, default="", help_text="Performance-model name; empty: none.")
    plan = models.CharField(max_length=32, blank=True, default="", help_text="The user's execution plan.")
    allowed_plans = models.JSONField(default=list, blank=True, help_text="Plans the scheduler may switch to.")
    min_gpus = models.PositiveIntegerField(default=0, help_text="Fewest GPUs the job may run on; 0: num_gpus.")
    max_gpus = models.PositiveIntegerField(default=0, help_text="Most GPUs the job may run on; 0: num_gpus.")
    guaranteed = models.BooleanField(default=False, help_text="Never run below the requested throughput.")
    reconfiguration_count = models.PositiveIntegerField(default=0)
    last_reconfigured_at = models.DateTimeField(null=True, blank=True)
    # The allocation a Reconfigure decided, from the decision until the next
    # attempt starts: the job relaunches with exactly this plan and GPU count.
    target_plan = models.CharField(max_length=32, blank=True, default="")
    target_gpus = models.PositiveIntegerField(default=0, help_text="0: no reconfiguration pending.")
    target_placement = models.JSONField(default=dict, blank=True, help_text="{node: GPUs} the decision chose.")
    # Confinement (docs/security.md): the POSIX account the job runs as, fixed at submission from its
    # owner's identity (scheduler.identity; empty in single-user mode).
    run_as = models.CharField(max_length=32, blank=True, default="", help_text="POSIX user the job runs as.")
    image = models.ForeignKey("scheduler.Image", null=True, blank=True, on_delete=models.PROTECT, related_name="jobs",
                              db_index=False, help_text="Root filesystem the job runs in (scheduler.images); empty: the node's.")
    excluded_nodes = models.JSONField(
        default=list, blank=True, help_text="Nodes the job is not placed on: its image was unavailable there.")
    project = models.ForeignKey("scheduler.Project", null=True, blank=True, on_delete=models.PROTECT, related_name="jobs",
                                db_index=False, help_text="What the job is charged to (scheduler.projects).")
    array_id = models.BigIntegerField(null=True, blank=True, help_text="Its array's first task; null: none.")
    array_max_running = models.PositiveIntegerField(null=True, blank=True, help_text="%N: most tasks running at once.")
    array_index = models.PositiveIntegerField(null=True, blank=True, help_text="Its index in the array (ID_INDEX).")
    dependency = models.CharField(max_length=1000, blank=True, default="", help_text="Jobs it waits for: afterok:ID,...")
    # An interactive session's kind (interactive app, docs/sessions.md); empty: a batch job.
    session_kind = models.CharField(max_length=16, blank=True, default="", help_text="jupyter, terminal; empty: batch.")

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [
            models.Index(fields=["state", "submitted_at"], name="job_state_submitted"),
            models.Index(fields=["submitted_at", "id"], name="job_submitted"),  # the lists' order, read backwards
            models.Index(fields=["owner", "state"], name="job_owner_state"),  # also every lookup by owner
            *(models.Index(fields=[f], name=f"job_{f.removesuffix('_id')}", condition=Q(**{f"{f}__isnull": False}))
              for f in ("image", "project", "array_id", "first_started_at", "ended_at")),  # partial: NULL costs nothing
        ]
        constraints = [
            models.CheckConstraint(condition=Q(num_gpus__gte=1, num_gpus__lte=MAX_GPUS_PER_JOB), name="job_num_gpus_range"),
            models.CheckConstraint(condition=Q(num_cpus__gte=0), name="job_num_cpus_nonneg"),
            models.CheckConstraint(condition=Q(mem_gb__gte=0), name="job_mem_gb_nonneg"),
            models.CheckConstraint(condition=Q(time_limit__isnull=True) | Q(time_limit__gt=0), name="job_time_limit_positive"),
            models.CheckConstraint(condition=Q(state__in=JobState.values), name="job_state_valid"),
            models.CheckConstraint(condition=Q(job_class__in=JobClassChoice.values), name="job_class_valid"),
            models.CheckConstraint(
                condition=Q(min_gpus=0) | Q(max_gpus=0) | Q(min_gpus__lte=F("max_gpus")), name="job_gpu_range_ordered"
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.name} ({self.state})"

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def holds_gpus(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def gpu_range(self) -> tuple[int, int]:
        """``(min, max)`` GPUs the job may run on (an adaptive job: from 1, scheduler.adaptive_jobs)."""
        return (1 if self.adaptive_app else self.min_gpus or self.num_gpus, self.max_gpus or self.num_gpus)

    @property
    def reconfigurable(self) -> bool:
        """Declared reconfigurable: a known model and more than one plan or GPU count."""
        return bool(self.model) and (bool(self.allowed_plans) or self.gpu_range != (self.num_gpus, self.num_gpus))

    @property
    def current_attempt(self) -> "Attempt | None":
        """The latest attempt, or None before the first start."""
        return self.attempts.order_by("-number").first()


class AttemptState(models.TextChoices):
    """Where one run of a job stands; every value except STARTING/RUNNING is final."""

    STARTING = "STARTING"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    PREEMPTED = "PREEMPTED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    NODE_LOST = "NODE_LOST"
    RECONFIGURED = "RECONFIGURED"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"  # went past its memory limit: the kernel's OOM killer ended it
    IMAGE_UNAVAILABLE = "IMAGE_UNAVAILABLE"  # the node could not fetch, verify or unpack the job's image


class NoticeReason(models.TextChoices):
    """Why the server told an attempt to stop (``Attempt.notice_reason``); empty for a
    preemption or a cancellation, which the job's state already tells apart."""

    NONE = "", "-"
    RECONFIGURE = "reconfigure"
    IDLE = "idle", "idle reclaim"  # a TE job ended for idleness (scheduler/reclaim_idle.py): CANCELLED, IDLE_RECLAIMED


#: Attempt states in which the attempt still holds its GPUs.
OPEN_ATTEMPT_STATES = frozenset({AttemptState.STARTING, AttemptState.RUNNING})


class Attempt(models.Model):
    """One run of a job on GPUs, with its preemption ledger.

    ``gpu_allocation`` maps node name to the GPU indices used there, e.g.
    ``{"node-a": [0, 1], "node-b": [3]}``. The ledger fields are filled when
    the attempt is preempted: ``notice_at`` (SIGTERM sent), ``vacated_at`` (process gone), ``checkpointed``
    (None: unknown / not preempted; ``checkpoint_marker``: whether that was the marker, not only a clean exit),
    ``lost_gpu_seconds`` (GPU-seconds of work not kept by a checkpoint) and
    ``preempted_for`` (id of the job the GPUs are being freed for, if any).
    ``unseen_since`` is kept by heartbeats: an attempt its node's agent no
    longer runs is ended as lost after a while (``cluster.liveness.heartbeat``).
    ``plan``, ``grad_accum_steps``, ``batch_size`` are what it was launched with; one stopped to be
    reconfigured has ``notice_reason = reconfigure`` and ends RECONFIGURED, never PREEMPTED, so
    preemption counts leave reconfigurations out.
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField(help_text="1 for the first run, then 2, 3, ...")
    gpu_allocation = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=20, choices=AttemptState.choices, default=AttemptState.STARTING)

    started_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    signal = models.IntegerField(null=True, blank=True, help_text="Signal that ended the process, if any.")
    pid = models.IntegerField(null=True, blank=True)
    log_path = models.CharField(max_length=500, blank=True, default="", help_text="Log file on the node.")

    notice_at = models.DateTimeField(null=True, blank=True)
    vacated_at = models.DateTimeField(null=True, blank=True)
    checkpointed = models.BooleanField(null=True, blank=True)
    checkpoint_marker = models.BooleanField(null=True, blank=True, help_text="The job wrote its checkpoint marker.")
    lost_gpu_seconds = models.FloatField(null=True, blank=True)
    preempted_for = models.BigIntegerField(
        null=True, blank=True,
        help_text="Id of the job the preemption frees this attempt's GPUs for (the scheduler counts them as promised).",
    )
    unseen_since = models.JSONField(
        default=dict, blank=True,
        help_text="Per node name, when (epoch seconds) that node's heartbeats stopped listing this attempt.",
    )
    # What the attempt ran with (the plan history of a reconfigurable job is its attempts).
    plan = models.CharField(max_length=32, blank=True, default="", help_text="Execution plan; empty: none declared.")
    grad_accum_steps = models.PositiveIntegerField(default=1)
    batch_size = models.PositiveIntegerField(default=0, help_text="Global batch chosen for an adaptive job; 0: none.")
    notice_reason = models.CharField(
        max_length=12, choices=NoticeReason.choices, blank=True, default="",
        help_text="Why the server told the attempt to stop: reconfigure, or empty (preemption, cancellation).",
    )
    # What the node measured and said (exit report): the attempt's cgroup peak memory and CPU time
    # (summed over nodes for CPU, the largest node's for memory; None: not measured) and its message.
    peak_mem_bytes = models.BigIntegerField(null=True, blank=True, help_text="Peak memory of the attempt, bytes.")
    cpu_seconds = models.FloatField(null=True, blank=True, help_text="CPU time of the attempt, seconds.")
    message = models.CharField(max_length=500, blank=True, default="", help_text="What the node said about the end.")

    class Meta:
        ordering = ["job_id", "number"]
        constraints = [
            models.UniqueConstraint(fields=["job", "number"], name="attempt_job_number_unique"),
            models.CheckConstraint(condition=Q(number__gte=1), name="attempt_number_positive"),
        ]
        indexes = [models.Index(fields=["state"], name="attempt_state")]

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.number} ({self.state})"

    @property
    def node_names(self) -> list[str]:
        return sorted(self.gpu_allocation or {})

    @property
    def gpu_count(self) -> int:
        return gpu_count(self.gpu_allocation)


class JobEvent(models.Model):
    """One state transition of a job: the job's timeline."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(default=timezone.now)
    from_state = models.CharField(max_length=12, blank=True, default="", help_text="Empty for submission.")
    to_state = models.CharField(max_length=12, choices=JobState.choices)
    reason = models.CharField(max_length=32, blank=True, default="")
    message = models.CharField(max_length=MESSAGE_LENGTH, blank=True, default="")

    class Meta:
        ordering = ["job_id", "at", "id"]
        indexes = [models.Index(fields=["job", "at"], name="jobevent_job_at")]

    def __str__(self) -> str:
        return f"job {self.job_id}: {self.from_state or 'submitted'} -> {self.to_state}"


class Quota(models.Model):
    """Limits for one user or one group; an empty limit means "no limit".

    Exactly one of ``user`` and ``group`` is set. A user is bound by their own
    quota and by the quota of every group they belong to (group usage is the sum
    over its members): the effective limit is the tightest. See
    ``scheduler.quotas`` for how each limit is checked.
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="quota"
    )
    group = models.OneToOneField(Group, null=True, blank=True, on_delete=models.CASCADE, related_name="quota")

    max_gpus = models.PositiveIntegerField(null=True, blank=True, help_text="Concurrent GPUs, all jobs.")
    max_te_gpus = models.PositiveIntegerField(null=True, blank=True, help_text="Concurrent GPUs of TE jobs.")
    max_te_job_gpus = models.PositiveIntegerField(null=True, blank=True, help_text="GPUs of the largest TE job.")
    max_te_runtime = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Longest TE time limit in seconds; a TE job without a time limit gets this one.",
    )
    gpu_hours_budget = models.FloatField(
        null=True, blank=True, help_text="GPU-hours allowed over the rolling period."
    )
    budget_period_days = models.PositiveIntegerField(default=7, help_text="Length of the rolling period.")
    max_pending_jobs = models.PositiveIntegerField(null=True, blank=True, help_text="Jobs waiting at once.")
    min_priority = models.IntegerField(
        null=True, blank=True, help_text="Lowest priority a job may ask for (empty: the global range's)."
    )
    max_priority = models.IntegerField(
        null=True, blank=True, help_text="Highest priority a job may ask for (empty: the global range's)."
    )

    note = models.CharField(max_length=200, blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["group__name", "user__username"]
        constraints = [
            models.CheckConstraint(
                condition=(Q(user__isnull=False) & Q(group__isnull=True))
                | (Q(user__isnull=True) & Q(group__isnull=False)),
                name="quota_exactly_one_scope",
            ),
            models.CheckConstraint(
                condition=Q(gpu_hours_budget__isnull=True) | Q(gpu_hours_budget__gte=0),
                name="quota_budget_nonneg",
            ),
            models.CheckConstraint(condition=Q(budget_period_days__gte=1), name="quota_period_positive"),
        ]

    def __str__(self) -> str:
        return f"quota of {self.scope_label}"

    @property
    def scope_label(self) -> str:
        if self.user_id is not None:
            return f"user {self.user.username}"
        return f"group {self.group.name}"


# Models defined in their own modules of this app, imported here so that Django registers them.
from scheduler.attempt_log import AttemptLog  # noqa: E402, F401
from scheduler.identity import PosixIdentity  # noqa: E402, F401
from scheduler.images import Image  # noqa: E402, F401
from scheduler.projects import Membership, Project  # noqa: E402, F401
