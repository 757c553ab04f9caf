"""The node page and the telemetry JSON of nodes and jobs: parse, check access, call one selector.

A node's page and telemetry need a login (any user sees the cluster's nodes,
as on the cluster page, but only staff see which job holds a GPU); a job's
telemetry is its owner's and staff's, anyone else gets a 404 as for the job.
"""

from __future__ import annotations

import time

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from cluster.models import Node
from gputelemetry import selectors
from scheduler.selectors import visible_jobs


def _node_or_404(name: str) -> Node:
    node = Node.objects.filter(name=name).first()
    if node is None:
        raise Http404("No such node.")
    return node


@login_required
@require_GET
def node_page(request: HttpRequest, name: str) -> HttpResponse:
    node = _node_or_404(name)
    return render(request, "gputelemetry/node.html", {
        "node": node, "windows": selectors.WINDOWS,
        "initial": selectors.node_telemetry(node.name, time.time(), selectors.WINDOWS[0]),
    })


@login_required
@require_GET
@never_cache
def node_json(request: HttpRequest, name: str) -> JsonResponse:
    node = _node_or_404(name)
    window = selectors.clamp_window(request.GET.get("window"))
    return JsonResponse(selectors.node_telemetry(node.name, time.time(), window))


@login_required
@require_GET
@never_cache
def job_json(request: HttpRequest, job_id: int) -> JsonResponse:
    job = visible_jobs(request.user).filter(pk=job_id).first()
    if job is None:
        raise Http404("No such job.")
    attempts = list(job.attempts.values_list("number", flat=True))
    window = selectors.clamp_window(request.GET.get("window"))
    found = selectors.job_telemetry(job.pk, attempts, time.time(), window)
    return JsonResponse(found or {"attempt": None, "window": window, "series": None})
