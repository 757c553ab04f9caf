"""Pages of interactive sessions: "Start a notebook" and the session's status (JSON, for the job page)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils import timezone

from interactive import selectors as sessions, services as session_services
from portal.forms import QUOTA_LIMIT_FIELD, SessionForm
from scheduler import selectors, services


@login_required
def session_new(request: HttpRequest) -> HttpResponse:
    """The form; a valid one submits the session and opens its job page (where "Open" appears once it is ready)."""
    form = SessionForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            job = session_services.start_session(request.user, data["kind"], num_gpus=data["num_gpus"],
                                                 time_limit=data.get("time_limit"), image=data.get("image") or "")
        except services.JobRequestInvalid as exc:
            for name, errors in exc.errors.items():
                for error in errors:
                    form.add_error(name if name in form.fields else None, error)
        except services.QuotaExceeded as exc:
            form.add_error(QUOTA_LIMIT_FIELD.get(exc.violation.limit), f"Quota: {exc.violation.message}")
        else:
            messages.success(request, f"Session {job.pk} submitted.")
            return redirect("job-detail", job_id=job.pk)
    return render(request, "portal/session_form.html", {"form": form}, status=400 if form.errors else 200)


@login_required
def session_status(request: HttpRequest, job_id: int) -> JsonResponse:
    """The session's life (``interactive.selectors.status``) for whoever may see the job; 404 otherwise."""
    job = selectors.visible_jobs(request.user).filter(pk=job_id).exclude(session_kind="").first()
    if job is None:
        raise Http404("No such session.")
    return JsonResponse({"job": job.pk, "state": job.state, **sessions.status(job, timezone.now())})


@login_required
def session_terminal(request: HttpRequest, job_id: int) -> HttpResponse:
    """A terminal session's page (xterm.js; its websocket goes through the proxy to /sessions/<id>/pty).

    For whoever may reach the running session (``interactive.selectors.target``), and only for a
    terminal; 404 otherwise, the same answer the proxy gives."""
    found = sessions.target(request.user, job_id)
    job = selectors.visible_jobs(request.user).filter(pk=job_id, session_kind="terminal").first()
    if found is None or job is None:
        raise Http404("No such session.")
    return render(request, "portal/session_terminal.html", {"job": job, "pty_path": f"/sessions/{job.pk}/pty"})
