"""Projects (accounts): what a job is charged to, and the tenants of fair share.

A user belongs to one or more projects through ``Membership`` rows; one of a
user's memberships may be their *default* (``is_default``, at most one per
user). A job is charged to one project, chosen at submission:

* the project named in the request, which must exist and count the owner
  among its members (else the request is refused under the field
  ``project``), or
* without a name, the owner's default project, else their only project when
  they belong to exactly one;
* a user who belongs to no project submits as before: the job is charged to
  no project (``Job.project`` empty), which fair share treats as one tenant
  of its own (named ``""``) with the default share. Jobs stored before
  projects existed are such jobs, so nothing needs rewriting.

A project's ``share`` is its weight in fair share (``scheduler.core.fairshare``);
its optional ``min_priority``/``max_priority`` narrow the priorities its jobs
may ask for, as a quota's range does for a user or group.

Admins manage projects, members, defaults and shares in the Django admin.
"""

from __future__ import annotations

import re

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q

#: Longest project name; names are short slugs (``vision``, ``nlp-team``).
MAX_PROJECT_NAME = 64
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


def validate_project_name(name: str) -> None:
    """Model-field validator: lower-case letters, digits, '.', '_' and '-', starting with a letter or digit."""
    if not _NAME_RE.fullmatch(name or ""):
        raise ValidationError(
            f"{name!r} is not a project name: use lower-case letters, digits, '.', '_' and '-', "
            "starting with a letter or digit.")


class Project(models.Model):
    """An account jobs are charged to; its members may submit to it."""

    name = models.CharField(max_length=MAX_PROJECT_NAME, unique=True, validators=[validate_project_name])
    description = models.CharField(max_length=500, blank=True, default="")
    share = models.FloatField(default=1.0, validators=[MinValueValidator(0.001)],
                              help_text="Weight in fair share (any positive number; shares are compared, not summed).")
    min_priority = models.IntegerField(null=True, blank=True,
                                       help_text="Lowest priority its jobs may ask for (empty: no narrower limit).")
    max_priority = models.IntegerField(null=True, blank=True,
                                       help_text="Highest priority its jobs may ask for (empty: no narrower limit).")
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, through="Membership", related_name="projects")

    class Meta:
        app_label = "scheduler"
        ordering = ["name"]
        constraints = [models.CheckConstraint(condition=Q(share__gt=0), name="project_share_positive")]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    """A user's membership of a project; ``is_default``: the project their jobs go to unless they name one."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    is_default = models.BooleanField(default=False, verbose_name="default project of this user")

    class Meta:
        app_label = "scheduler"
        ordering = ["project__name", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["project", "user"], name="membership_unique"),
            models.UniqueConstraint(fields=["user"], condition=Q(is_default=True), name="membership_one_default"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.project}"


def resolve(owner, name: str) -> tuple[Project | None, str | None]:  # noqa: ANN001 - a user model instance
    """The project a job of ``owner`` is charged to, and why it cannot be (module doc).

    Returns ``(project, None)`` (project None: charged to no project) or
    ``(None, message)`` when the request must be refused under ``project``.
    """
    rows = list(Membership.objects.filter(user_id=owner.pk).select_related("project"))
    if name:
        for m in rows:
            if m.project.name == name:
                return m.project, None
        if not Project.objects.filter(name=name).exists():
            return None, f'No project is named "{name}".'
        return None, f'You are not a member of project "{name}".'
    for m in rows:
        if m.is_default:
            return m.project, None
    if len(rows) == 1:
        return rows[0].project, None
    if rows:
        names = ", ".join(sorted(m.project.name for m in rows))
        return None, f"You belong to several projects ({names}) and have no default: name one."
    return None, None


def priority_problem(project: Project | None, priority: int) -> str | None:
    """Why ``priority`` is outside ``project``'s range, or None."""
    if project is None:
        return None
    low, high = project.min_priority, project.max_priority
    if low is not None and priority < low:
        return f"At least {low} for jobs of project {project.name}."
    if high is not None and priority > high:
        return f"At most {high} for jobs of project {project.name}."
    return None


def names_of(user) -> list[str]:  # noqa: ANN001 - a user model instance
    """The names of the projects ``user`` belongs to, sorted."""
    return list(Project.objects.filter(memberships__user_id=user.pk).order_by("name").values_list("name", flat=True))
