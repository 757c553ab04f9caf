"""The server's own tasks, sealed: a worker runs a task only if a server process sent it, or if it is a report.

The report queue (``protocol.REPORT_QUEUE``) is also the queue of the server's own tasks (a
scheduling cycle, forecasts, a tick, notifications, a simulation), and every node may append to it
(``cluster.broker_acl`` allows each node's Redis user exactly that). A report proves its sender with
its node's signature (``cluster.message_signing``), but the server's own tasks proved nothing: a
node could queue ``notifications.dispatch`` with every event id and have every past job's owner
emailed and every webhook called again, or a cycle whenever it liked.

So every task message a server process publishes (anything not going to a node's queue, whose
commands are signed with that node's token instead) carries the header ``gpusched_seal``:
HMAC-SHA256 under ``SECRET_KEY`` (key salt ``gpusched.server-task``) of the task's name, its id and
its arguments in canonical JSON. A worker runs a task that is not a report only when its seal
verifies under ``SECRET_KEY`` or one of ``SECRET_KEY_FALLBACKS``; anything else is logged, audited
(at most once a minute per task name) and acknowledged without running. Reports (tasks declared
with ``from_nodes = True``) are run as before and check their own signatures.

``SECRET_KEY`` is on every portal, worker and beat and on no node, so a node cannot seal; nor can it
copy a seal onto other arguments, since the arguments are sealed. What a seal does not stop: a
reader of the report queue replaying a server task as it was sent; with its own Redis user a node
can only append to that queue, never read it. Calls in the same process (``task(...)``, eager
``apply``) are not messages and are not checked.

Upgrading from a release before seals, portals and beat of the old release still send unsealed
tasks until they are replaced: ``GPUSCHED_RUN_UNSEALED_TASKS=true`` on the new workers runs them
(each logged) until then; a seal that does not verify is refused even so.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from celery import Task
from celery.signals import before_task_publish
from django.conf import settings
from django.utils.crypto import constant_time_compare, salted_hmac

from cluster.protocol import NODE_QUEUE_PREFIX

log = logging.getLogger(__name__)

HEADER = "gpusched_seal"
KEY_SALT = "gpusched.server-task"
#: A refused task name is audited at most this often per worker process; each refusal is logged.
AUDIT_INTERVAL_S = 60.0
_last_audit: dict[str, float] = {}


def canonical(task: str, task_id: str, args: Iterable[Any] | None, kwargs: Mapping[str, Any] | None) -> bytes:
    """What a seal covers, in the form both sides compute alike: JSON turns tuples into lists, and the
    worker sees the arguments after the broker's JSON round trip."""
    return json.dumps([task, task_id, list(args or ()), dict(kwargs or {})], sort_keys=True,
                      separators=(",", ":"), ensure_ascii=True, default=str).encode()


def seal(task: str, task_id: str, args: Iterable[Any] | None, kwargs: Mapping[str, Any] | None,
         secret: str | None = None) -> str:
    """The seal of one task message under ``secret`` (default: ``SECRET_KEY``)."""
    return salted_hmac(KEY_SALT, canonical(task, task_id, args, kwargs), secret=secret or settings.SECRET_KEY,
                       algorithm="sha256").hexdigest()


def verifies(task: str, request: Any) -> bool:
    """Whether ``request`` (a task's ``self.request``) carries a seal of ``task`` with its own id and
    arguments under ``SECRET_KEY`` or one of ``SECRET_KEY_FALLBACKS``."""
    given = getattr(request, HEADER, None)
    if not isinstance(given, str) or not given:
        return False
    secrets = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", ())]
    return any(constant_time_compare(given, seal(task, str(request.id), request.args, request.kwargs, secret))
               for secret in secrets if secret)


@before_task_publish.connect
def seal_outgoing(sender: str | None = None, body: Any = None, headers: dict[str, Any] | None = None,
                  routing_key: str | None = None, **_: Any) -> None:
    """Seal every task message this process publishes, except commands to nodes (signed per node).

    Connected when this module is imported, which ``cluster.broker`` does in every server process.
    Celery publishes the ``headers`` dict it passes here, so the seal travels with the message."""
    if headers is None or (routing_key or "").startswith(NODE_QUEUE_PREFIX):
        return
    if not isinstance(body, (tuple, list)) or len(body) < 2 or not getattr(settings, "SECRET_KEY", ""):
        return  # not Celery's message protocol 2, or a process without the server's key (an agent)
    task = headers.get("task") or sender or ""
    headers[HEADER] = seal(str(task), str(headers.get("id")), body[0], body[1])


class SealedTask(Task):
    """The base of every task of the server's Celery app: runs a task received from the broker only
    when it is a report (``from_nodes``) or its seal verifies (``verifies``)."""

    #: True for the REPORT_* tasks, which nodes send and which check their senders' signatures.
    from_nodes: bool = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        request = self.request
        received = not (getattr(request, "called_directly", True) or getattr(request, "is_eager", False))
        if received and not self.from_nodes and not verifies(self.name, request):
            how = "sealed" if getattr(request, HEADER, None) else "unsealed"
            if how == "sealed" or not settings.GPUSCHED_RUN_UNSEALED_TASKS:
                refuse(self.name, str(request.id), how)
                return None
            log.warning("task %s (%s) carries no seal; run because GPUSCHED_RUN_UNSEALED_TASKS is set (only "
                        "while server processes of a release before seals still send tasks)", self.name, request.id)
        return super().__call__(*args, **kwargs)


def refuse(task: str, task_id: str, how: str) -> None:
    """Log (and at most once a minute per task name, audit) a task that was not run."""
    why = ("its seal does not verify under this server's SECRET_KEY" if how == "sealed"
           else "it carries no seal: not sent by a server process of this cluster")
    log.error("task %s (%s) not run: %s", task, task_id, why)
    now = time.monotonic()
    if now - _last_audit.get(task, float("-inf")) < AUDIT_INTERVAL_S:
        return
    _last_audit[task] = now
    from audit import services as audit  # the audit app needs Django's app registry, ready by now
    from audit.models import Action

    try:
        audit.record(Action.TASK_REFUSED, target=f"task {task}", actor_name="broker", detail=f"{task_id}: {why}")
    except Exception as exc:  # noqa: BLE001 - the refusal stands whether or not it could be audited
        log.warning("could not audit the refused task %s (%s)", task, exc)
