"""Job images: root filesystems an admin registers, that a job may name to run in.

An image is a name, the path of a root filesystem tarball on storage every
node reaches (``uri``), the tarball's ``sha256:<hex>`` digest (the node
verifies what it unpacks) and an ``enabled`` flag. A submission naming an
unknown or disabled image is refused (field ``image``); the launch carries
``image``, ``image_uri`` and ``image_digest`` (``scheduler.confinement``).

When a node cannot make the image available (missing tarball, wrong digest,
unpacking failed) the attempt ends ``IMAGE_UNAVAILABLE`` and the node is added
to the job's ``excluded_nodes``: the snapshot passes them to the policy as a
placement constraint (``JobSpec.excluded_nodes``), so the job is not sent there
again; when every node is excluded the job is held with reason
ImageUnavailable. Saving the image in the admin clears the exclusions of its
pending jobs (``services.clear_image_exclusions``: the admin fixed it, so every
node gets another chance).
"""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

MAX_IMAGE_NAME = 200
# The launch contract's rules (cluster.protocol): what an agent accepts.
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]*")
_DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")


def validate_image_name(value: str) -> None:
    if not _NAME_RE.fullmatch(value) or len(value) > MAX_IMAGE_NAME:
        raise ValidationError(f"{value!r} is not an image name: 1-{MAX_IMAGE_NAME} characters of "
                              "A-Z a-z 0-9 . _ : / @ + -, starting with a letter or digit.")


def validate_uri(value: str) -> None:
    if not value.startswith("/") or "\x00" in value or "\n" in value:
        raise ValidationError("Must be an absolute path to a root filesystem tarball on shared storage.")


def validate_digest(value: str) -> None:
    if not _DIGEST_RE.fullmatch(value):
        raise ValidationError("Must be 'sha256:' followed by 64 lower-case hex digits (sha256sum of the tarball).")


class Image(models.Model):
    """A root filesystem jobs may run in, registered by an admin."""

    name = models.CharField(max_length=MAX_IMAGE_NAME, unique=True, validators=[validate_image_name])
    uri = models.CharField(max_length=1000, validators=[validate_uri], verbose_name="tarball path",
                           help_text="Absolute path of the root filesystem tarball on storage every node reaches.")
    digest = models.CharField(max_length=71, validators=[validate_digest],
                              help_text="sha256:<hex> of the tarball; nodes refuse a tarball that does not match.")
    enabled = models.BooleanField(default=True, help_text="Disabled: new jobs may not name it.")
    note = models.CharField(max_length=200, blank=True, default="")
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        app_label = "scheduler"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name if self.enabled else f"{self.name} (disabled)"

    def save(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        self.updated_at = timezone.now()
        super().save(*args, **kwargs)


def resolve(names: set[str]) -> tuple[dict[str, Image], dict[str, str]]:
    """``({name: image}, {name: why refused})`` for the image names of a submission (one query;
    none when no job names an image)."""
    names = names - {""}
    found = {image.name: image for image in Image.objects.filter(name__in=names)} if names else {}
    usable: dict[str, Image] = {}
    problems: dict[str, str] = {}
    for name in names:
        if name not in found:
            problems[name] = f"No image is registered as {name!r}."
        elif not found[name].enabled:
            problems[name] = f"The image {name!r} is disabled."
        else:
            usable[name] = found[name]
    return usable, problems


def unavailable_message(image: str, nodes: list[str], said: str) -> str:
    """The pending message of a job whose image ``nodes`` could not make available; ``said`` is
    the attempt's stored message (``"<node>: <what the agent reported>"``), if any."""
    return f"image {image or '?'} unavailable on {said or ', '.join(nodes)}"


def held_message(excluded: list[str]) -> str:
    """Why a job is held: its image was unavailable on every node that is up."""
    return (f"image unavailable on every node that is up ({', '.join(sorted(excluded))}); "
            "held until an administrator fixes the image or another node joins")

