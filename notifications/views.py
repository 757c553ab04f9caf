"""The notification pages: my defaults, my webhooks and my delivery log; one job's choices."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from notifications.forms import ChoicesForm, WebhookForm
from notifications.models import Delivery, JobPreference, Preference, Webhook
from notifications.services import choices_for
from scheduler import selectors

DELIVERIES_SHOWN = 50


@login_required
def settings_page(request: HttpRequest) -> HttpResponse:
    """GET: the page; POST ``action=defaults`` saves the default choices, ``action=webhook`` adds a webhook."""
    preference = Preference.objects.filter(user=request.user).first() or Preference(user=request.user)
    choices = ChoicesForm(initial={"email_events": preference.email_events, "webhook_events": preference.webhook_events})
    webhook_form = WebhookForm()
    status = 200
    if request.method == "POST" and request.POST.get("action") == "defaults":
        choices = ChoicesForm(request.POST)
        if choices.is_valid():
            preference.email_events = choices.cleaned_data["email_events"]
            preference.webhook_events = choices.cleaned_data["webhook_events"]
            preference.save()
            messages.success(request, "Notification defaults saved.")
            return redirect("notifications")
        status = 400
    elif request.method == "POST" and request.POST.get("action") == "webhook":
        webhook_form = WebhookForm(request.POST)
        if webhook_form.is_valid():
            Webhook.objects.create(owner=request.user, url=webhook_form.cleaned_data["url"])
            messages.success(request, "Webhook added; its secret signs every delivery.")
            return redirect("notifications")
        status = 400
    return render(request, "notifications/settings.html", {
        "choices": choices, "webhook_form": webhook_form, "email": request.user.email,
        "webhooks": Webhook.objects.filter(owner=request.user, project__isnull=True).order_by("pk"),
        "deliveries": Delivery.objects.filter(owner=request.user).order_by("-pk")[:DELIVERIES_SHOWN],
    }, status=status)


@login_required
@require_POST
def webhook_delete(request: HttpRequest, webhook_id: int) -> HttpResponse:
    hook = get_object_or_404(Webhook, pk=webhook_id, owner=request.user, project__isnull=True)
    hook.delete()
    messages.success(request, "Webhook deleted.")
    return redirect("notifications")


@login_required
def job_choices(request: HttpRequest, job_id: int) -> HttpResponse:
    """One job's notification choices (its owner's default until saved; ``action=reset`` goes back to it)."""
    job = selectors.visible_jobs(request.user).filter(pk=job_id).first()
    if job is None:
        raise Http404("No such job.")
    email_kinds, webhook_kinds = choices_for(job)
    form = ChoicesForm(initial={"email_events": email_kinds, "webhook_events": webhook_kinds})
    own = JobPreference.objects.filter(job=job).exists()
    if request.method == "POST":
        if request.POST.get("action") == "reset":
            JobPreference.objects.filter(job=job).delete()
            messages.success(request, f"Job {job.pk} follows your notification defaults again.")
            return redirect("job-notifications", job_id=job.pk)
        form = ChoicesForm(request.POST)
        if form.is_valid():
            JobPreference.objects.update_or_create(job=job, defaults={
                "email_events": form.cleaned_data["email_events"],
                "webhook_events": form.cleaned_data["webhook_events"]})
            messages.success(request, f"Notifications of job {job.pk} saved.")
            return redirect("job-notifications", job_id=job.pk)
        return render(request, "notifications/job.html", {"job": job, "form": form, "own": own}, status=400)
    return render(request, "notifications/job.html", {"job": job, "form": form, "own": own})
