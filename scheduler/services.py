"""Writes to scheduler data on a user's behalf: submission and cancellation.

A job is created ``PENDING``; every later change of its state goes through
``scheduler.transitions`` (a conditional update plus one ``JobEvent``), so
concurrent writers (the loop, agent reports, a user cancelling) never
overwrite each other's transitions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from scheduler import (adaptive_jobs, announce, dependencies, elastic, identity, images, projects, quotas,
                       request_capacity, transitions)
from scheduler.models import (ACTIVE_STATES, DEFAULT_GRACE_PERIOD_S, MAX_COMMAND_LENGTH, MAX_CPUS_PER_JOB, MAX_GPUS_PER_JOB,
                              MAX_GRACE_PERIOD_S, MAX_MEM_GB_PER_JOB, MAX_NAME_LENGTH, MAX_TIME_LIMIT_S, PRIORITY_RANGE,
                              TERMINAL_STATES, Job, JobClassChoice, JobEvent, JobState, Quota)
from scheduler.selectors import Capacity, cluster_capacity, quota_usage
from scheduler.triggers import request_scheduling


class JobRequestInvalid(Exception):
    """The request breaks a rule; ``errors`` maps field name to messages."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


class QuotaExceeded(Exception):
    """A quota refuses the job; ``violation`` says which limit, its value and the usage.

    ``index``: for a job array, the position of the job refused (None otherwise).
    """

    def __init__(self, violation: quotas.Violation, index: int | None = None) -> None:
        super().__init__(violation.message)
        self.violation = violation
        self.index = index


class JobArrayInvalid(Exception):
    """Jobs of an array break rules; ``errors`` maps a job's position to its field errors."""

    def __init__(self, errors: dict[int, dict[str, list[str]]]) -> None:
        super().__init__("; ".join(f"job {i}: {JobRequestInvalid(e)}" for i, e in errors.items()))
        self.errors = errors


class JobNotCancellable(Exception):
    """The job has already finished."""

    def __init__(self, job: Job) -> None:
        super().__init__(f"job {job.pk} has already finished ({job.state})")
        self.job = job


@dataclass(frozen=True, slots=True)
class JobRequest:
    """A submission after type parsing (by a form or a serializer), before the rules."""

    name: str
    command: str
    job_class: str = JobClassChoice.BE
    num_gpus: int = 1
    num_cpus: float = 0.0
    mem_gb: float = 0.0
    grace_period: int = DEFAULT_GRACE_PERIOD_S
    time_limit: int | None = None
    priority: int = 0
    # Reconfigurable training jobs (scheduler/elastic.py: clean_request has the rules).
    model: str = ""
    plan: str = ""
    allowed_plans: tuple[str, ...] = ()
    min_gpus: int | None = None
    max_gpus: int | None = None
    guaranteed: bool = False
    adaptive_app: str = ""  # an adaptive (Pollux) job's profile: scheduler.adaptive_jobs.clean_request
    image: str = ""  # a registered, enabled image to run in (scheduler.images); empty: the node's root filesystem
    project: str = ""  # the project to charge (scheduler.projects); empty: the owner's default
    session_kind: str = ""  # an interactive session's kind (interactive.services checks it); empty: a batch job
    dependency: str = ""  # jobs this one waits for, as Slurm's --dependency (scheduler.dependencies)


def validate_request(req: JobRequest, capacity: Capacity) -> dict[str, list[str]]:
    """Every rule broken by ``req``, by field name (empty: valid).

    GPU counts: 1 to 64 always; when nodes are registered, a TE job must fit on
    the largest node (TE jobs run on one node) and a BE job on all registered
    GPUs together (BE jobs may span nodes, all or nothing); so must its CPUs and
    memory with its GPUs, when ``capacity`` has the nodes' shapes (``request_capacity``).
    """
    errors: dict[str, list[str]] = {}

    def add(name: str, message: str) -> None:
        errors.setdefault(name, []).append(message)

    if not req.name.strip():
        add("name", "This field may not be blank.")
    elif len(req.name) > MAX_NAME_LENGTH:
        add("name", f"At most {MAX_NAME_LENGTH} characters.")
    if not req.command.strip():
        add("command", "This field may not be blank.")
    elif len(req.command) > MAX_COMMAND_LENGTH:
        add("command", f"At most {MAX_COMMAND_LENGTH} characters.")
    if req.job_class not in JobClassChoice.values:
        add("job_class", f'"{req.job_class}" is not a job class; use TE or BE.')
    if req.num_gpus < 1:
        add("num_gpus", "Must be at least 1.")
    elif req.num_gpus > MAX_GPUS_PER_JOB:
        add("num_gpus", f"At most {MAX_GPUS_PER_JOB} GPUs per job.")
    elif capacity.nodes and req.job_class == JobClassChoice.TE and req.num_gpus > capacity.largest_node_gpus:
        add("num_gpus", f"A TE job runs on one node; the largest node has {capacity.largest_node_gpus} GPUs.")
    elif capacity.nodes and req.num_gpus > capacity.total_gpus:
        add("num_gpus", f"The cluster has {capacity.total_gpus} GPUs in all.")
    for name, value, top in (("num_cpus", req.num_cpus, MAX_CPUS_PER_JOB), ("mem_gb", req.mem_gb, MAX_MEM_GB_PER_JOB)):
        if not math.isfinite(value):
            add(name, "Must be a finite number.")
        elif value < 0:
            add(name, "Must be at least 0.")
        elif value > top:
            add(name, f"At most {top}.")
    for name, messages in request_capacity.shape_errors(req.num_gpus, req.num_cpus, req.mem_gb, req.job_class == "TE",
                                                        capacity.node_shapes).items():
        errors.setdefault(name, []).extend(messages)
    if not 0 <= req.grace_period <= MAX_GRACE_PERIOD_S:
        add("grace_period", f"Must be between 0 and {MAX_GRACE_PERIOD_S} seconds.")
    if req.time_limit is not None and not 1 <= req.time_limit <= MAX_TIME_LIMIT_S:
        add("time_limit", f"Must be between 1 and {MAX_TIME_LIMIT_S} seconds.")
    low, high = PRIORITY_RANGE
    if not low <= req.priority <= high:
        add("priority", f"Must be between {low} and {high}.")
    for name, messages in _reconfig(req)[1].items():
        errors.setdefault(name, []).extend(messages)
    return errors


def _reconfig(req: JobRequest) -> tuple[dict, dict[str, list[str]]]:
    """The request's reconfiguration (or adaptive) fields, normalized, and the rules they break."""
    adaptive = bool(req.adaptive_app.strip())
    fields, errors = elastic.clean_request(num_gpus=req.num_gpus, model=req.model, plan=req.plan,
                                           allowed_plans=req.allowed_plans, min_gpus=req.min_gpus,
                                           max_gpus=None if adaptive else req.max_gpus, guaranteed=req.guaranteed)
    more, wrong = adaptive_jobs.clean_request(num_gpus=req.num_gpus, adaptive_app=req.adaptive_app,
                                              max_gpus=req.max_gpus, model=req.model, job_class=req.job_class)
    for name, messages in wrong.items():
        errors.setdefault(name, []).extend(messages)
    return {**fields, **more}, errors


def submit_job(owner, req: JobRequest) -> Job:  # noqa: ANN001 - a user model instance
    """Validate, apply quotas and create a PENDING job; one scheduling cycle follows the commit.

    Raises ``JobRequestInvalid`` or ``QuotaExceeded``; nothing is written then.
    An owner without a usable POSIX identity (``scheduler.identity``) is
    refused with the error under ``identity``; the job stores the name it
    will run as (``run_as``). A TE job without a time limit gets the tightest
    ``max_te_runtime`` of its owner's quotas. Submissions of one user (and of the members of a group,
    for group quotas) are serialized by row locks so that the pending-job
    count cannot be overrun by concurrent requests.

    The returned job carries its (empty) attempts and its submission event as
    if prefetched, so an answer can be rendered from it without reading back.
    """
    errors = validate_request(req, cluster_capacity(shapes=bool(req.num_cpus or req.mem_gb)))
    usable, image_problems = images.resolve({req.image})
    if req.image in image_problems:
        errors.setdefault("image", []).append(image_problems[req.image])
    run_as, identity_errors = _run_as(owner)
    errors.update(identity_errors)
    project, project_error = projects.resolve(owner, req.project)
    if project_error:
        errors.setdefault("project", []).append(project_error)
    dependency, dependency_error = dependencies.resolve(owner, project, req.dependency)
    if dependency_error:
        errors.setdefault("dependency", []).append(dependency_error)
    if errors:
        raise JobRequestInvalid(errors)
    req = replace(req, dependency=dependency)
    with transaction.atomic():
        scopes = _locked_scopes(owner)
        refused = quotas.priority_error(req.priority, scopes, PRIORITY_RANGE) or projects.priority_problem(
            project, req.priority)
        if refused:
            raise JobRequestInvalid({"priority": [refused]})
        if req.job_class == JobClassChoice.TE and req.time_limit is None:
            req = replace(req, time_limit=quotas.effective_te_runtime(scopes))
        job = Job(owner=owner, run_as=run_as, image=usable.get(req.image), project=project, **_fields(req))
        violation = quotas.check_submission(job, scopes)
        if violation:
            raise QuotaExceeded(violation)
        job.save()
        cycle = dependencies.refuse_cycle(job) if job.dependency else ""
        if cycle:
            raise JobRequestInvalid({"dependency": [cycle]})  # rolls the job back
        event = JobEvent.objects.create(job=job, at=job.submitted_at, to_state=JobState.PENDING, reason="Submitted")
        transaction.on_commit(lambda: request_scheduling())
    _as_prefetched(job, [event])
    return job


#: Most jobs one array may hold.
MAX_ARRAY_JOBS = 500


def submit_jobs(owner, reqs: list[JobRequest], indices: list[int] | None = None,  # noqa: ANN001
                max_running: int | None = None) -> list[Job]:
    """Submit a job array: every job of ``reqs`` becomes PENDING, or none does. The jobs share an
    array id (the first job's id) and job i has the index ``indices[i]`` (default i): ``ID_INDEX``;
    ``max_running``: at most that many of them run at once (``%N``).

    The same rules as ``submit_job`` for each job, checked against the
    owner's quotas as if the jobs were submitted one after the other (each
    counts as pending for the next), under the same row locks. Raises
    ``JobArrayInvalid`` (every job's field errors, by position) or
    ``QuotaExceeded`` with ``index`` set to the first job refused; nothing is
    written then. An owner without a usable POSIX identity gets
    ``JobRequestInvalid`` (field ``identity``) before any job is looked at.
    Jobs are stored in order (increasing ids) with one insert for
    the jobs and one for their submission events; one scheduling request
    follows the commit. The returned jobs carry attempts and events as
    ``submit_job``'s does.
    """
    if not 1 <= len(reqs) <= MAX_ARRAY_JOBS:
        raise ValueError(f"a job array holds 1 to {MAX_ARRAY_JOBS} jobs, not {len(reqs)}")
    run_as, identity_errors = _run_as(owner)
    if identity_errors:
        raise JobRequestInvalid(identity_errors)
    capacity = cluster_capacity(shapes=any(req.num_cpus or req.mem_gb for req in reqs))
    reqs = list(reqs)  # dependencies are stored in their canonical form
    errors = {i: found for i, req in enumerate(reqs) if (found := validate_request(req, capacity))}
    usable, image_problems = images.resolve({req.image for req in reqs})
    charged = {}
    for i, req in enumerate(reqs):
        if req.image in image_problems:
            errors.setdefault(i, {}).setdefault("image", []).append(image_problems[req.image])
        if req.project not in charged:
            charged[req.project] = projects.resolve(owner, req.project)
        if charged[req.project][1]:
            errors.setdefault(i, {}).setdefault("project", []).append(charged[req.project][1])
        dependency, dependency_error = dependencies.resolve(owner, charged[req.project][0], req.dependency)
        if dependency_error:
            errors.setdefault(i, {}).setdefault("dependency", []).append(dependency_error)
        reqs[i] = replace(req, dependency=dependency)
    if errors:
        raise JobArrayInvalid(errors)
    with transaction.atomic():
        scopes = _locked_scopes(owner)
        refused = {i: {"priority": [msg]} for i, req in enumerate(reqs)
                   if (msg := quotas.priority_error(req.priority, scopes, PRIORITY_RANGE)
                       or projects.priority_problem(charged[req.project][0], req.priority))}
        if refused:
            raise JobArrayInvalid(refused)
        jobs = []
        for i, req in enumerate(reqs):
            if req.job_class == JobClassChoice.TE and req.time_limit is None:
                req = replace(req, time_limit=quotas.effective_te_runtime(scopes))
            job = Job(owner=owner, run_as=run_as, image=usable.get(req.image), project=charged[req.project][0],
                      array_index=indices[i] if indices else i, array_max_running=max_running, **_fields(req))
            violation = quotas.check_submission(job, scopes)
            if violation:
                raise QuotaExceeded(violation, index=i)
            for scope in scopes:  # the next job of the array sees this one pending
                scope.usage.pending_jobs += 1
            jobs.append(job)
        Job.objects.bulk_create(jobs)
        Job.objects.filter(pk__in=[job.pk for job in jobs]).update(array_id=jobs[0].pk)
        for job in jobs:
            job.array_id = jobs[0].pk
        events = JobEvent.objects.bulk_create(
            JobEvent(job=job, at=job.submitted_at, to_state=JobState.PENDING, reason="Submitted") for job in jobs
        )
        # bulk_create sends no signals: announce the new queue entries ourselves.
        announce.job_submitted(jobs[0].pk)
        transaction.on_commit(lambda: request_scheduling())
    for job, event in zip(jobs, events, strict=True):
        _as_prefetched(job, [event])
    return jobs


def _run_as(owner) -> tuple[str, dict[str, list[str]]]:  # noqa: ANN001
    """The POSIX name the owner's jobs run as, or the ``identity`` error refusing the submission."""
    try:
        return identity.run_as_for(owner), {}
    except identity.IdentityMissing as exc:
        return "", {"identity": [str(exc)]}


def _fields(req: JobRequest) -> dict:
    return {
        "name": req.name.strip(),
        "command": req.command,
        "job_class": req.job_class,
        "num_gpus": req.num_gpus,
        "num_cpus": float(req.num_cpus),
        "mem_gb": float(req.mem_gb),
        "grace_period": req.grace_period,
        "time_limit": req.time_limit,
        "priority": req.priority,
        "session_kind": req.session_kind,
        "dependency": req.dependency,
        **_reconfig(req)[0],
    }


def _locked_scopes(owner) -> list[quotas.Scope]:  # noqa: ANN001
    """The quota scopes binding ``owner`` with their usage, under the owner's row locks.

    Call inside a transaction. Only when a quota binds the owner are the rows
    locked and the usage summed (those sums grow with the owner's queue):
    without a quota there is no limit that concurrent submissions could
    overrun, and the two lock queries would be paid on every submission.
    A quota created while submissions are in flight binds from the next one.
    """
    if not _has_quota(owner):
        return []
    _lock_quota_subjects(owner)
    return quota_usage(user_ids=[owner.pk]).scopes_for(owner.pk)


def _as_prefetched(job: Job, events: list[JobEvent]) -> None:
    """Give a just-created job its attempts (none) and events as ``prefetch_related`` would.

    The same structure Django's prefetching builds: evaluated querysets in the
    instance's prefetch cache, so ``job.events.all()`` reads no row.
    """
    cache = {}
    for name, rows in (("attempts", []), ("events", events)):
        queryset = getattr(job, name).all()
        queryset._result_cache = rows  # noqa: SLF001 - as django.db.models.query.prefetch_one_level does
        queryset._prefetch_done = True  # noqa: SLF001
        cache[name] = queryset
    job._prefetched_objects_cache = cache  # noqa: SLF001


def _has_quota(owner) -> bool:  # noqa: ANN001
    """Whether a quota of the owner or of one of their groups exists (one query)."""
    return Quota.objects.filter(Q(user_id=owner.pk) | Q(group__user=owner.pk)).exists()


def _lock_quota_subjects(owner) -> None:  # noqa: ANN001
    """Lock the owner's row and their groups' rows (in id order, so no deadlock)."""
    get_user_model().objects.select_for_update().filter(pk=owner.pk).first()
    list(Group.objects.select_for_update().filter(user=owner).order_by("pk").values_list("pk", flat=True))


def cancel_job(job: Job, by) -> Job:  # noqa: ANN001 - a user model instance
    """Cancel ``job``: a waiting job is CANCELLED at once, a running one becomes CANCELLING.

    The scheduling loop then stops the process (SIGTERM, grace, SIGKILL) and
    moves it to CANCELLED. Cancelling a CANCELLING job changes nothing. Raises
    ``JobNotCancellable`` if the job has finished. Returns the job as stored.
    """
    who = f"cancelled by {by.get_username()}"
    now = timezone.now()
    with transaction.atomic():
        for _ in range(3):
            job.refresh_from_db(fields=["state"])
            if job.state in TERMINAL_STATES:
                raise JobNotCancellable(job)
            if job.state == JobState.CANCELLING:
                break
            if job.state in ACTIVE_STATES:
                done = transitions.move(job.pk, expect=ACTIVE_STATES - {JobState.CANCELLING}, to=JobState.CANCELLING,
                                        reason="Cancelled", message=who, at=now)
            else:  # PENDING or NODE_LOST: no process of ours runs
                done = transitions.move(
                    job.pk, expect={JobState.PENDING, JobState.NODE_LOST}, to=JobState.CANCELLED,
                    reason="Cancelled", message=who, at=now, ended_at=now, pending_reason="", pending_message="",
                )
            if done:
                transaction.on_commit(lambda: request_scheduling())
                break
    job.refresh_from_db()
    return job


def clear_image_exclusions(image: images.Image) -> int:
    """Give every node another chance at ``image`` (an admin changed it): clear the excluded nodes
    of its pending jobs. Returns how many jobs changed."""
    return Job.objects.filter(image=image, state=JobState.PENDING).exclude(excluded_nodes=[]).update(excluded_nodes=[])
