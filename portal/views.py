"""Browser pages: parse, call one service or selector, render."""

from __future__ import annotations

import time

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.templatetags.static import static
from django.utils import timezone
from django.views.decorators.http import require_POST

from audit import services as audit
from interactive.selectors import status as session_status
from jobprogress.selectors import job_progress
from portal.api.errors import json_not_found
from portal.forms import QUOTA_LIMIT_FIELD, STATE_GROUPS, JobFilterForm, JobForm, PriorityForm, TokenForm
from portal.models import ApiToken
from portal.api.views import usage_csv_response
from portal.cli.output import ended_because
from scheduler import arrays, fair_standing, fair_usage, forecast_store, holds, job_priority, selectors, services, usage
from scheduler.attempt_log import log_tail
from scheduler.core.priority_factors import priority_factors
from scheduler.models import PRIORITY_RANGE, TERMINAL_STATES, Job, JobState
from scheduler.projects import names_of as project_names

JOBS_PER_PAGE = 25
# Log lines of the latest attempt in the job page's HTML (the live page then streams the last 2,000).
JOB_DETAIL_LOG_LINES = 200


@login_required
def job_list(request: HttpRequest) -> HttpResponse:
    form = JobFilterForm(request.GET or None)
    filters = {}
    if form.is_bound and form.is_valid():
        filters = {k: v for k, v in form.cleaned_data.items() if v}
        if not request.user.is_staff:
            filters.pop("owner", None)
        if filters.get("state") in STATE_GROUPS:
            filters["state"] = STATE_GROUPS[filters["state"]]
    jobs = selectors.filter_jobs(selectors.visible_jobs(request.user), **filters)
    page = Paginator(jobs, JOBS_PER_PAGE).get_page(request.GET.get("page"))
    forecast_store.attach(page)
    _attach_endings(page)
    query = request.GET.copy()
    query.pop("page", None)
    return render(request, "portal/job_list.html",
                  {"form": form, "page": page, "query": query.urlencode(), "show_owner": request.user.is_staff})


def _attach_endings(jobs) -> None:  # noqa: ANN001 - a page of Job rows
    """Give each ended job of ``jobs`` ``ended_because``: (reason, message) of the event that ended it."""
    events = selectors.events_of([job.pk for job in jobs if job.ended_at])
    for job in jobs:
        job.ended_because = ended_because(events[job.pk]) if job.pk in events else ("", "")


@login_required
def job_new(request: HttpRequest) -> HttpResponse:
    form = JobForm(request.POST or None, projects=project_names(request.user))
    if request.method == "POST" and form.is_valid():
        try:
            job = services.submit_job(request.user, form.to_request())
        except services.JobRequestInvalid as exc:
            for name, errors in exc.errors.items():
                for error in errors:
                    form.add_error(name if name in form.fields else None, error)
        except services.QuotaExceeded as exc:
            v = exc.violation
            form.add_error(QUOTA_LIMIT_FIELD.get(v.limit),
                           f"Quota: {v.message} (limit {v.limit} = {v.limit_value:g}, current usage {v.current_usage:g}).")
        else:
            messages.success(request, f"Job {job.pk} submitted.")
            return redirect("job-detail", job_id=job.pk)
    return render(request, "portal/job_form.html", {"form": form}, status=400 if form.errors else 200)


@login_required
def array_task(request: HttpRequest, array_id: int, index: int) -> HttpResponse:
    """``/jobs/12_3/``: the page of task 3 of array 12 (a redirect), 404 for a task the user may not see."""
    job_id = arrays.visible_task_id(request.user, f"{array_id}_{index}")
    if job_id is None:
        raise Http404("No such array task.")
    return redirect("job-detail", job_id=job_id)


@login_required
def job_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    job = selectors.job_with_history(request.user, job_id)
    if job is None:
        raise Http404("No such job.")
    attempts = list(job.attempts.all())
    latest = attempts[-1] if attempts else None
    log_lines = log_tail(latest.pk, JOB_DETAIL_LOG_LINES).lines if latest else []
    events = list(job.events.all())
    return render(request, "portal/job_detail.html", {
        "job": job, "attempts": attempts, "events": events, "latest": latest,
        "ended_because": ended_because([{"reason": e.reason, "message": e.message} for e in events])
        if job.ended_at else ("", ""),
        "log_lines": log_lines, "can_cancel": job.state not in TERMINAL_STATES,
        "can_hold": job.state == JobState.PENDING and not job.hold,
        "can_reprioritize": job.state == JobState.PENDING, "priority_range": PRIORITY_RANGE,
        "can_release": job.state not in TERMINAL_STATES and holds.may_release(job, request.user),
        "progress": job_progress(job.pk),
        "session": session_status(job, timezone.now()),
        "forecast": forecast_store.read_one(job.pk) if job.state == JobState.PENDING else None,
        "factors": (priority_factors(job.job_class, job.priority, job.submitted_at.timestamp(), time.time(),
                                     tenant=job.project.name if job.project else "", tenants=fair_usage.tenants_now())
                    if job.state == JobState.PENDING else None),
    })


def _visible_job_or_404(request: HttpRequest, job_id: int) -> Job:
    """The job ``job_id`` if the user may see it; 404 otherwise, as for a job that does not exist."""
    job = selectors.visible_jobs(request.user).filter(pk=job_id).first()
    if job is None:
        raise Http404("No such job.")
    return job


@login_required
@require_POST
def job_cancel(request: HttpRequest, job_id: int) -> HttpResponse:
    job = _visible_job_or_404(request, job_id)
    try:
        job = services.cancel_job(job, request.user)
        audit.record_staff_cancel(request, job)
    except services.JobNotCancellable as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Job {job.pk} is {job.state}.")
    return redirect("job-detail", job_id=job.pk)


@login_required
@require_POST
def job_hold(request: HttpRequest, job_id: int) -> HttpResponse:
    return _hold_change(request, job_id, holds.hold_job)


@login_required
@require_POST
def job_release(request: HttpRequest, job_id: int) -> HttpResponse:
    return _hold_change(request, job_id, holds.release_job)


def _hold_change(request: HttpRequest, job_id: int, change) -> HttpResponse:  # noqa: ANN001 - holds.hold_job or release_job
    """The job page's Hold and Release buttons (``scheduler.holds``); the refusal, if any, is shown there."""
    job = _visible_job_or_404(request, job_id)
    try:
        job = change(job, request.user)
        audit.record_staff_hold(request, job, change.__name__)
    except holds.HoldRefused as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Job {job.pk} is {'held' if job.hold else 'not held'}.")
    return redirect("job-detail", job_id=job.pk)


@login_required
@require_POST
def job_priority_change(request: HttpRequest, job_id: int) -> HttpResponse:
    """The job page's priority form (``scheduler.job_priority``): a refusal names the field and changes nothing."""
    job = _visible_job_or_404(request, job_id)
    form = PriorityForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"priority: {' '.join(form.errors['priority'])}")
        return redirect("job-detail", job_id=job.pk)
    try:
        job = job_priority.change_priority(job, request.user, form.cleaned_data["priority"])
        audit.record_staff_priority(request, job)
    except job_priority.PriorityRefused as exc:
        messages.error(request, f"priority: {exc}")
    else:
        messages.success(request, f"Job {job.pk} has priority {job.priority}.")
    return redirect("job-detail", job_id=job.pk)


@login_required
def tokens(request: HttpRequest) -> HttpResponse:
    """List the caller's tokens; POST creates one and shows its key once."""
    form = TokenForm(request.POST or None)
    new_key = None
    status = 200
    if request.method == "POST":
        if form.is_valid():
            token, new_key = ApiToken.issue(request.user, form.cleaned_data["name"])
            form = TokenForm()
        else:
            status = 400
    listing = ApiToken.objects.filter(user=request.user)
    return render(request, "portal/tokens.html", {"form": form, "tokens": listing, "new_key": new_key}, status=status)


@login_required
@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, pk=token_id, user=request.user)
    if token.revoked is None:
        ApiToken.objects.filter(pk=token.pk, revoked__isnull=True).update(revoked=timezone.now())
        messages.success(request, f"Token '{token.name}' revoked.")
    return redirect("tokens")


def home(request: HttpRequest) -> HttpResponse:
    return redirect("job-list" if request.user.is_authenticated else "login")


def favicon(request: HttpRequest) -> HttpResponse:
    """/favicon.ico, which browsers ask for on pages that link none (the admin's, the API docs)."""
    return redirect(static("portal/favicon.ico"), permanent=True)


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """JSON under /api/, the HTML page elsewhere."""
    if request.path.startswith("/api/"):
        return json_not_found(request, exception)
    return render(request, "404.html", status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Server error."}, status=500)
    return render(request, "500.html", status=500)


@login_required
def usage_page(request: HttpRequest) -> HttpResponse:
    """Usage by project or user over a period: a stacked area of GPU-hours, a table, each project's
    fair-share standing now and the quotas beside."""
    try:
        query = usage.parse_query(request.GET)
    except usage.UsageQueryInvalid as exc:
        return render(request, "portal/usage.html", {"errors": exc.errors, "params": request.GET}, status=400)
    data = usage.report(request.user, query)
    rows = [{**row, "name": row[query.by], "beside": data["beside"].get(row[query.by], {})} for row in data["rows"]]
    quota = data["quota"]
    quota_rows = [(LIMIT_LABELS.get(name, name), name, value, quota["usage"].get(name))
                  for name, value in quota["limits"].items()]
    return render(request, "portal/usage.html", {"report": data, "rows": rows, "quota_rows": quota_rows,
                                                 "standing": fair_standing.report(request.user),
                                                 "params": request.GET, "query": query,
                                                 "csv_query": request.GET.urlencode()})


#: What each quota limit bounds, in words, for the usage page (the API and gpusched keep the names).
LIMIT_LABELS = {
    "max_gpus": "GPUs at once, all jobs", "max_te_gpus": "GPUs at once, TE jobs",
    "max_te_job_gpus": "GPUs of the largest TE job", "max_te_runtime": "Longest TE time limit",
    "gpu_hours_budget": "GPU-hours per budget period", "budget_period_days": "Budget period (days)",
    "max_pending_jobs": "Jobs waiting at once", "min_priority": "Lowest priority", "max_priority": "Highest priority",
}


@login_required
def usage_csv(request: HttpRequest) -> HttpResponse:
    """The usage page's table as a CSV download (same parameters)."""
    try:
        query = usage.parse_query(request.GET)
    except usage.UsageQueryInvalid as exc:
        return JsonResponse({"errors": exc.errors}, status=400)
    return usage_csv_response(usage.report(request.user, query))
