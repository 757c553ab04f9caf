"""Notifications: telling users by email and webhooks when something happens to their jobs.

A top-level Django app rather than a part of ``scheduler`` or ``portal``: it
reacts to the scheduler's job events without the scheduler knowing about it
(the scheduler stays free of mail servers and HTTP clients, and its loop never
waits for them), and it owns user-facing settings, webhooks and a delivery
log, which are not the portal's job pages either.

Flow: every job-event write (``scheduler.transitions``) reaches ``hooks``,
which keeps only the events a user can be notified of (``events.kind_of``)
and, after the transaction commits, enqueues one Celery task with their ids.
That task (``tasks.dispatch``) reads each job owner's choices (per job, else
the owner's default), sends the emails and creates one ``Delivery`` per
webhook, each sent by its own task (``tasks.deliver_webhook``), retried with
exponential backoff.
"""
