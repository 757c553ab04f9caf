"""The agent's two broker paths: consuming node.<name> and publishing reports.

Commands are consumed with a plain kombu consumer rather than a Celery
worker (reasons in docs/agent.md): the agent's main loop calls ``poll()``
between its own periodic work, so there is one thread and no pool. Reports are
published with a client-only Celery app's ``send_task`` so they are ordinary
Celery task messages for the portal's workers; GPU telemetry, the one report
every node sends every few seconds, is appended to a Redis stream that the
server reads in batches (``cluster.telemetry_stream``).
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from typing import Any

import redis
from celery import Celery
from kombu import Consumer, Exchange, Queue
from kombu.exceptions import EncodeError

from cluster import broker_acl, message_signing, telemetry_stream
from cluster.protocol import REPORT_QUEUE, REPORT_TELEMETRY, node_queue

log = logging.getLogger(__name__)

# Messages the broker hands over before they are acked; commands are cheap, so
# a small window is enough and limits what a crashed agent leaves unacked.
PREFETCH = 16
CONNECT_TIMEOUT = 2.0  # seconds
SOCKET_TIMEOUT = 2.0  # seconds a broker command may take; above kombu's 1 s BRPOP wait


# A command this agent took but did not ack (it died while handling it) is put back in its queue
# after this long, by the agent itself once it runs again: the same delay as the server's workers
# (BROKER_VISIBILITY_TIMEOUT), which restored such commands while every consumer shared kombu's keys.
VISIBILITY_TIMEOUT = 10.0  # seconds


def _own_keys(node: str) -> dict[str, Any]:
    """Transport options that keep this node's broker traffic on keys of its own, so that a per-node
    Redis user (``cluster.broker_acl``) can do all of it: its unacked messages under its own keys
    rather than kombu's shared ones (which every consumer could read), restored by itself, and one
    priority level, since the server sends commands without priorities and each level is a key."""
    return {**broker_acl.unacked_keys(node), "priority_steps": [0], "visibility_timeout": VISIBILITY_TIMEOUT,
            "unacked_restore_interval": 1, "unacked_restore_throttle": 1, "client_name": broker_acl.client_name(node)}


class BrokerDown(ConnectionError):
    """The broker connection failed; the caller retries later."""


OnMessage = Callable[[dict[str, Any] | None, Any, Any], None]


class BrokerLink:
    """One node's command queue and report publisher on one broker URL. Reports go signed with the
    node's ``token`` (``cluster.message_signing``), which is never sent."""

    def __init__(self, url: str, node: str, on_message: OnMessage, report_queue: str = REPORT_QUEUE,
                 token: str = "") -> None:
        self.app = Celery("gpusched-agent", broker=url, set_as_current=False)
        self.app.conf.update(
            task_serializer="json",
            accept_content=["json"],
            broker_connection_retry_on_startup=False,
            broker_connection_timeout=CONNECT_TIMEOUT,
            # A broker cut off without closing the connection (a network partition) makes a
            # publish fail after this long instead of blocking the loop until TCP gives up.
            broker_transport_options={"socket_timeout": SOCKET_TIMEOUT, "socket_connect_timeout": CONNECT_TIMEOUT,
                                      **_own_keys(node)},
        )
        self.node = node
        name = node_queue(node)
        # The same declaration Celery makes for a missing queue named in send_task(queue=...).
        self.queue = Queue(name, Exchange(name, type="direct"), routing_key=name)
        self.report_queue = report_queue
        self.token = token
        self.on_message = on_message
        self._conn = None
        self._consumer = None
        self._stream_url = telemetry_stream.redis_url(url)
        self._stream: redis.Redis | None = None

    @property
    def connected(self) -> bool:
        return self._consumer is not None

    def connect(self) -> None:
        """Connect and start consuming; raises BrokerDown on failure."""
        conn = self.app.connection_for_read()
        try:
            # One quick try: the agent loop retries, and must not stall while
            # jobs need supervising.
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=CONNECT_TIMEOUT)
            consumer = Consumer(
                conn.channel(),
                queues=[self.queue],
                callbacks=[self._deliver],
                accept=["json"],
                on_decode_error=self._undecodable,
                prefetch_count=PREFETCH,
            )
            consumer.consume()
        except Exception as exc:
            conn.release()
            raise BrokerDown(f"cannot consume {self.queue.name}: {exc}") from exc
        self._conn, self._consumer = conn, consumer
        log.info("consuming %s", self.queue.name)

    def poll(self, timeout: float) -> None:
        """Handle the commands that arrive within ``timeout`` seconds (at least one wait)."""
        if self._conn is None:
            raise BrokerDown("not connected")
        try:
            self._conn.drain_events(timeout=timeout)
        except socket.timeout:
            return
        except (self._conn.connection_errors + self._conn.channel_errors) as exc:
            self.close()
            raise BrokerDown(f"lost the broker while consuming: {exc}") from exc

    def publish(self, task: str, kwargs: dict[str, Any]) -> bool:
        """Send one report, signed now; False if it can never be sent (it is dropped).

        Raises BrokerDown when the broker is unreachable (the caller keeps the
        report and retries; publishing itself never retries so the loop does
        not stall while the broker is away).
        """
        try:
            signed = message_signing.signed(self.token, task, kwargs, time.time())
        except (TypeError, ValueError):
            log.exception("dropping unencodable %s report", task)
            return False
        return self._send(task, signed)

    def _send(self, task: str, kwargs: dict[str, Any]) -> bool:
        try:
            # Celery sends to a plain queue through the anonymous exchange (a LPUSH); declaring
            # the queue as well would write its routing table, which a node's broker user may not.
            self.app.send_task(task, kwargs=kwargs, queue=self.report_queue, retry=False, declare=[])
        except EncodeError:
            log.exception("dropping unencodable %s report", task)
            return False
        except Exception as exc:  # kombu/redis raise several connection error types
            raise BrokerDown(f"cannot publish {task}: {exc}") from exc
        return True

    def publish_telemetry(self, kwargs: dict[str, Any]) -> None:
        """Send one telemetry report: appended to the telemetry stream when the broker is Redis
        (``cluster.telemetry_stream``), else sent as the report task; a report with health events
        (``telemetry_stream.carries_events``) always as the task, which no trimming can lose.
        Raises BrokerDown when the broker is unreachable; an unencodable report is dropped with a
        log line."""
        if self._stream_url is None or telemetry_stream.carries_events(kwargs):
            self.publish(REPORT_TELEMETRY, kwargs)
            return
        try:
            kwargs = message_signing.signed(self.token, REPORT_TELEMETRY, kwargs, time.time())
            if self._stream is None:
                self._stream = redis.Redis.from_url(self._stream_url, socket_timeout=SOCKET_TIMEOUT,
                                                    socket_connect_timeout=CONNECT_TIMEOUT,
                                                    client_name=broker_acl.client_name(self.node))
            telemetry_stream.publish(self._stream, kwargs)
        except (TypeError, ValueError):
            log.exception("dropping unencodable telemetry report")
        except redis.RedisError as exc:
            raise BrokerDown(f"cannot append telemetry to {telemetry_stream.STREAM_KEY}: {exc}") from exc

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        if self._conn is not None:
            try:
                self._conn.release()
            except Exception:  # already broken; nothing left to release
                pass
        self._conn = self._consumer = None

    def _deliver(self, body: Any, message: Any) -> None:
        self.on_message(message.headers, body, message)

    def _undecodable(self, message: Any, exc: Exception) -> None:
        log.error("dropping a message on %s that is not JSON: %s", self.queue.name, exc)
        message.ack()
