"""The dashboard's pages and downloads: parse, call one selector or service, render.

Every page needs a login. The live pages render their first state into the
page (so they show something before the WebSocket connects) and then follow
the pushes of ``portal.consumers``. Simulation runs are visible to their owner
and staff only; anyone else gets a 404, as for jobs.
"""

from __future__ import annotations

import json

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from portal import cluster_cache, metrics
from portal.dashboard import latency, report, selectors, simulation
from portal.dashboard.forms import SimulationForm
from portal.dashboard.models import ACTIVE_RUN_STATES, RunState, SimulationRun

RUNS_LISTED = 50


@login_required
@require_GET
def cluster_page(request: HttpRequest) -> HttpResponse:
    shared = cluster_cache.stored_state()  # what the live pages were last sent, when it is still current
    return render(request, "dashboard/cluster.html", {
        "initial_state": selectors.cluster_state(request.user) if shared is None
        else selectors.for_viewer(shared, request.user),
        "queue_titles": [("TE", "Trial-and-error (TE)"), ("BE", "Best-effort (BE)")],
    })


@login_required
@require_GET
def latency_page(request: HttpRequest) -> HttpResponse:
    try:
        window = int(request.GET.get("window", latency.DEFAULT_LATENCY_WINDOW))
    except ValueError:
        window = latency.DEFAULT_LATENCY_WINDOW
    if window not in latency.LATENCY_WINDOWS:
        window = latency.DEFAULT_LATENCY_WINDOW
    return render(request, "dashboard/latency.html", {
        "initial_state": latency.latency_stats(window),
        "windows": [(w, _window_label(w)) for w in latency.LATENCY_WINDOWS],
    })


def _window_label(seconds: int) -> str:
    if seconds % 86400 == 0:
        return f"{seconds // 86400} day{'s' if seconds > 86400 else ''}"
    if seconds % 3600 == 0:
        return f"{seconds // 3600} hour{'s' if seconds > 3600 else ''}"
    return f"{seconds // 60} minutes"


# --- Simulation ------------------------------------------------------------------


def _visible_runs(user):  # noqa: ANN001, ANN202
    """Runs ``user`` may see (own, or all for staff), without the large columns."""
    runs = SimulationRun.objects.select_related("owner").defer("trace_text", "figure", "results", "table")
    return runs if user.is_staff else runs.filter(owner=user)


def _run_or_404(request: HttpRequest, run_id: int) -> SimulationRun:
    runs = SimulationRun.objects.select_related("owner").defer("trace_text")
    if not request.user.is_staff:
        runs = runs.filter(owner=request.user)
    run = runs.filter(pk=run_id).first()
    if run is None:
        raise Http404("No such simulation.")
    return run


@login_required
def simulation_page(request: HttpRequest) -> HttpResponse:
    """The form (POST starts a run) and the caller's recent runs."""
    form = SimulationForm(request.POST or None, request.FILES or None)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                run = simulation.create_run(request.user, form.to_request())
            except simulation.TooManyRuns as exc:
                form.add_error(None, str(exc))
            else:
                # Tagged so the result page can take it down once the run has left QUEUED.
                messages.success(request, f"Simulation {run.pk} queued.", extra_tags="run-queued")
                return redirect("simulation-detail", run_id=run.pk)
        status = 400
    simulation.fail_stale(timezone.now())
    runs = list(_visible_runs(request.user)[:RUNS_LISTED])
    return render(request, "dashboard/simulation.html", {
        "form": form, "runs": runs, "show_owner": request.user.is_staff,
        "max_upload": settings.SIMULATION_MAX_UPLOAD_BYTES,
    }, status=status)


@login_required
@require_GET
def simulation_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run_or_404(request, run_id)
    return render(request, "dashboard/simulation_detail.html", {"run": run, "status": status_payload(run)})


@login_required
@require_GET
@never_cache
def simulation_status(request: HttpRequest, run_id: int) -> JsonResponse:
    """Progress while the run is active; results, figure and table once it has succeeded."""
    run = _run_or_404(request, run_id)
    # Polled every second: only a running run can have lost its worker, and then it shows as failed.
    if run.state == RunState.RUNNING and simulation.fail_stale(timezone.now()):
        run = _run_or_404(request, run_id)
    return JsonResponse(status_payload(run))


def status_payload(run: SimulationRun) -> dict:
    payload = {
        "id": run.pk,
        "state": run.state,
        "active": run.state in ACTIVE_RUN_STATES,
        "progress_done": run.progress_done,
        "progress_total": run.progress_total,
        "fraction": run.progress_fraction,
        "current_policy": run.current_policy,
        "workload": run.workload_label,
        "error": run.error,
    }
    if run.state == RunState.SUCCEEDED:
        payload.update({
            "summary": report.summary_rows(run.results or []),
            "notes": [note for result in run.results or [] for note in result.get("notes", [])],
            "figure": run.figure,
            "table": run.table,
            "downloads": {
                "json": reverse("simulation-json", args=[run.pk]),
                "html": reverse("simulation-report", args=[run.pk]),
            },
        })
    return payload


@login_required
@require_GET
def simulation_json(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _finished_run(request, run_id)
    body = json.dumps(run.results, indent=2, allow_nan=False) + "\n"
    response = HttpResponse(body, content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="simulation-{run.pk}.json"'
    return response


@login_required
@require_GET
def simulation_report(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _finished_run(request, run_id)
    response = HttpResponse(report.render_report(run), content_type="text/html; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="simulation-{run.pk}.html"'
    return response


def _finished_run(request: HttpRequest, run_id: int) -> SimulationRun:
    run = _run_or_404(request, run_id)
    if run.state != RunState.SUCCEEDED:
        raise Http404("This simulation has no results (yet).")
    return run


# --- /metrics ----------------------------------------------------------------------


@require_GET
@never_cache
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus exposition, for a bearer token (METRICS_TOKEN), an allowed address (METRICS_ALLOWED_IPS)
    or a logged-in staff member (an administrator can look without configuring a scraper first)."""
    if request.user.is_authenticated and request.user.is_active and request.user.is_staff:
        body, content_type = metrics.exposition()
        return HttpResponse(body, content_type=content_type)
    status = metrics.access_decision(
        request.META.get("REMOTE_ADDR"),
        request.META.get("HTTP_AUTHORIZATION"),
        settings.METRICS_TOKEN,
        metrics.parse_networks(settings.METRICS_ALLOWED_IPS),
    )
    if status == 401:
        response = HttpResponse("A valid bearer token is required.\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    if status != 200:
        configured = settings.METRICS_TOKEN or settings.METRICS_ALLOWED_IPS
        reason = "This address may not read the metrics." if configured else (
            "Metrics are open to staff sessions only: set METRICS_TOKEN or METRICS_ALLOWED_IPS for a scraper.")
        return HttpResponse(reason + "\n", status=403, content_type="text/plain")
    body, content_type = metrics.exposition()
    return HttpResponse(body, content_type=content_type)
