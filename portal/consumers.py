"""WebSocket consumers of the live pages: thin adapters between ``portal.realtime`` hints and selectors.

Each consumer checks the same permissions as its page when it connects
(anonymous: close code 4401; a job that is not the viewer's and the viewer is
not staff: 4404, exactly like the page's 404), joins its group, sends the full
state once, and afterwards sends fresh state whenever a hint arrives.
Permissions are not only checked at connect: every socket also joins its
viewer's group (``realtime.user_group``) and closes with 4401 when the
viewer's access is revoked (``access.revoke_access``), and before every push
it reads its user afresh (``access.current_user``: session not ended or
expired, password unchanged, account active), closing with 4401 otherwise, and
sends what that user may see now; the job page re-checks that the job is
visible (4404), so a staff member demoted loses others' job pages at once. Hints
are coalesced: however many arrive within ``DEBOUNCE_S`` (and during a
refresh), one refresh follows. On (re)connection the page gets the full state
again, so a dropped connection loses nothing.

Messages to the browser are JSON objects with a ``type``:

* cluster page: ``{"type": "cluster", "state": {...}}`` (``selectors.cluster_state``: one read of
  ``selectors.shared_cluster_state`` per burst serves every cluster page of the process, ``CLUSTER_READ``,
  each given what its viewer may see by ``selectors.for_viewer``); a page connected with ``?changes=1``
  gets that once, then ``{"type": "cluster-changes", "changes": {...}}`` (``cluster_delta.changes``
  against the state it was last sent); the browser may send ``{"type": "refresh"}`` to get a fresh state;
* latency page: ``{"type": "latency", "state": {...}}`` (``latency.latency_stats``, one read per window per burst
  for every latency page of the process, ``LATENCY_READS``);
  the browser may send ``{"window": seconds}`` (one of ``LATENCY_WINDOWS``);
* job page: ``{"type": "job", "state": {...}}`` (``job_page.job_state``) and
  ``{"type": "log", "attempt": N, "lines": [...], "reset": bool, "truncated": bool}``:
  ``reset`` replaces what the page shows (first message of an attempt),
  otherwise the lines are appended; and ``{"type": "progress", "progress": {...}}``
  (``jobprogress.selectors.job_progress``) after each progress report.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from portal import access, cluster_cache, realtime
from portal.env import env_int
from portal.dashboard import cluster_delta, job_page, latency, selectors
from portal.shared_read import SharedRead

logger = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
#: Hints arriving within this many seconds are answered with one refresh.
DEBOUNCE_S = 0.1
#: The latency page recomputes percentiles at most this often.
LATENCY_MIN_INTERVAL_S = 1.0
#: A live page's message longer than this many characters goes as several parts (``message_parts``):
#: daphne refuses to send a WebSocket message over 1 MiB, and a 1,000-node cluster's whole state is 1.1 MB.
LIVE_MESSAGE_MAX_CHARS = env_int("LIVE_MESSAGE_MAX_CHARS", 256 * 1024, minimum=64)
#: A cluster page is sent at most this many bytes per second: after a push of the whole state, the next
#: waits its size over this (a 1,000-node whole state of 1.1 MB: 0.55 s), so a busy large cluster does not
#: send each open page megabytes ten times a second. Small clusters keep ``DEBOUNCE_S``.
CLUSTER_PUSH_BYTES_PER_S = 2_000_000


def push_interval(size_bytes: int) -> float:
    """Seconds to wait after a push of ``size_bytes`` before the next: at least ``DEBOUNCE_S``."""
    return max(DEBOUNCE_S, size_bytes / CLUSTER_PUSH_BYTES_PER_S)


class Coalescer:
    """Runs ``refresh`` after ``delay`` seconds once per burst of ``poke()`` calls.

    A poke during a refresh schedules exactly one more, so the last change is
    never missed and a burst never queues more than one refresh.
    """

    def __init__(self, refresh: Callable[[], Awaitable[None]], delay: float) -> None:
        self._refresh = refresh
        self.delay = delay  # read before each wait: a refresh may change it for the next
        self._dirty = False
        self._task: asyncio.Task | None = None

    def poke(self) -> None:
        self._dirty = True
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while self._dirty:
            await asyncio.sleep(self.delay)
            self._dirty = False
            try:
                await self._refresh()
            except Exception:  # a failed refresh must not kill the connection; the next hint retries
                logger.exception("live refresh failed")

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()


def message_parts(text: str, message_id: int, max_chars: int) -> list[dict]:
    """A JSON message too long to send at once, as ``{"type": "part", "id", "index", "count", "text"}``
    objects whose texts joined in order are ``text`` (``static/dashboard/live.js`` puts them back
    together). Each part's JSON is at most about twice ``max_chars`` (quotes are escaped)."""
    count = -(-len(text) // max_chars)
    return [{"type": "part", "id": message_id, "index": i, "count": count,
             "text": text[i * max_chars:(i + 1) * max_chars]} for i in range(count)]


class _LiveConsumer(AsyncJsonWebsocketConsumer):
    """Common connect/disconnect: authentication, group membership, coalesced refresh."""

    group: str = ""
    debounce: float = DEBOUNCE_S
    _sent_long = 0  # messages sent in parts on this socket, each's parts share its number

    async def send_json(self, content: object, close: bool = False) -> None:
        """Every live message goes through ``send_text``: none of any page may be too long to send."""
        await self.send_text(await self.encode_json(content), close=close)

    async def send_text(self, text: str, close: bool = False) -> None:
        """Send ``text`` (a JSON message), in parts when it is longer than ``LIVE_MESSAGE_MAX_CHARS``:
        daphne refuses to send one message over 1 MiB and drops the connection instead."""
        limit = LIVE_MESSAGE_MAX_CHARS
        if len(text) <= limit:
            await self.send(text_data=text, close=close)
            return
        self._sent_long += 1
        parts = message_parts(text, self._sent_long, limit)
        for i, part in enumerate(parts):  # each part is sent as it is, never split again
            await self.send(text_data=json.dumps(part), close=close and i == len(parts) - 1)

    async def connect(self) -> None:
        self.coalescer = Coalescer(self.push, self.debounce)
        await self.accept()  # accept first so the close code reaches the browser
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        if not await self.authorize(user):
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.joined = [self.group_name(), realtime.user_group(user.pk)]
        for group in self.joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.refresh()

    async def disconnect(self, code: int) -> None:
        if getattr(self, "coalescer", None) is not None:
            self.coalescer.cancel()
        for group in getattr(self, "joined", ()):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def push(self, refresh: Callable[[], Awaitable[None]] | None = None) -> None:
        """``refresh`` (default: the whole state) as the viewer's rights are now: closed with 4401 when they are
        no longer signed in, 4404 when they may no longer see the page (a staff member demoted, on another
        user's job page); their user read afresh, so a change of rights shows at once (a demoted staff
        member's cluster page loses the links to others' jobs)."""
        user = await database_sync_to_async(access.current_user)(self.scope)
        if user is None:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.scope["user"] = user
        if not await self.authorize(user):
            await self.close(code=CLOSE_NOT_FOUND)
            return
        await (refresh or self.refresh)()

    async def access_revoked(self, message: dict) -> None:
        await self.close(code=CLOSE_UNAUTHENTICATED)

    async def authorize(self, user) -> bool:  # noqa: ANN001
        return True

    def group_name(self) -> str:
        return self.group

    async def refresh(self) -> None:
        raise NotImplementedError


#: The cluster state read once for all the cluster pages of this process that refresh together.
#: Its read is shared with the portal's other processes in turn (``cluster_cache``).
CLUSTER_READ: SharedRead[dict] = SharedRead(
    lambda: cluster_cache.shared_state(database_sync_to_async(selectors.shared_cluster_state)))
#: What changed between two such reads, compared once for all the pages that were sent the first.
CLUSTER_CHANGES = cluster_delta.LastChanges()


class ClusterConsumer(_LiveConsumer):
    group = realtime.CLUSTER_GROUP

    async def connect(self) -> None:
        # A read that began before this page joined may lack a change whose hint it never got.
        self.changed_at = time.monotonic()
        # A page that asks for changes gets the whole state once, then only what changed since its last
        # message (``cluster_delta``); at 1,000 nodes that is kilobytes instead of 1.1 MB per push.
        self.wants_changes = b"changes=1" in self.scope.get("query_string", b"").split(b"&")
        self.sent: dict | None = None  # the shared state this page was last sent, as ``for_viewer`` of it
        self.sent_rights: tuple = ()
        await super().connect()

    async def receive_json(self, content: dict, **kwargs: object) -> None:
        # The page asks now and then, so time-based figures (utilization over the last hour)
        # move on even when nothing happens; coalesced like a hint.
        if isinstance(content, dict) and content.get("type") == "refresh":
            self.changed_at = time.monotonic()
            self.coalescer.poke()

    async def refresh(self) -> None:
        shared = await CLUSTER_READ.get(newer_than=self.changed_at)
        user = self.scope["user"]
        rights = (user.pk, user.is_staff)  # what ``for_viewer`` depends on: other rights, a whole state again
        if self.sent is None or self.sent_rights != rights:
            message = {"type": "cluster", "state": selectors.for_viewer(shared, user)}
        else:
            changes = selectors.changes_for_viewer(CLUSTER_CHANGES.between(self.sent, shared), user)
            message = {"type": "cluster-changes", "changes": changes}
        text = await self.encode_json(message)
        await self.send_text(text)
        if self.wants_changes:
            self.sent, self.sent_rights = shared, rights  # the shared read itself: no copy per page
        self.coalescer.delay = push_interval(len(text))

    async def cluster_changed(self, message: dict) -> None:
        self.changed_at = time.monotonic()
        self.coalescer.poke()


#: The latency page's figures (the same for every viewer), read once per window for all the latency pages
#: of this process that refresh after the same change: each read scans the window's jobs (0.2 s at 300,000).
LATENCY_READS: dict[int, SharedRead[dict]] = {
    window: SharedRead(lambda window=window: database_sync_to_async(latency.latency_stats)(window))
    for window in latency.LATENCY_WINDOWS
}


class LatencyConsumer(_LiveConsumer):
    group = realtime.LATENCY_GROUP
    debounce = LATENCY_MIN_INTERVAL_S

    async def connect(self) -> None:
        self.window = _window_from_query(self.scope.get("query_string", b""))
        self.changed_at = time.monotonic()  # as the cluster page: no read that began before this page joined
        await super().connect()

    async def receive_json(self, content: dict, **kwargs: object) -> None:
        window = content.get("window") if isinstance(content, dict) else None
        if window in latency.LATENCY_WINDOWS:
            self.window = window
            self.changed_at = time.monotonic()
            await self.push()
        else:
            await self.send_json({"type": "error", "message": f"window must be one of {list(latency.LATENCY_WINDOWS)}"})

    async def refresh(self) -> None:
        state = await LATENCY_READS[self.window].get(newer_than=self.changed_at)
        await self.send_json({"type": "latency", "state": state})

    async def latency_changed(self, message: dict) -> None:
        self.changed_at = time.monotonic()
        self.coalescer.poke()


def _window_from_query(query: bytes) -> int:
    from urllib.parse import parse_qs

    values = parse_qs(query.decode("latin-1")).get("window", [])
    try:
        window = int(values[0]) if values else latency.DEFAULT_LATENCY_WINDOW
    except ValueError:
        return latency.DEFAULT_LATENCY_WINDOW
    return window if window in latency.LATENCY_WINDOWS else latency.DEFAULT_LATENCY_WINDOW


class JobConsumer(_LiveConsumer):
    """One job's page: state, timeline and ledger, and the log of its latest attempt as it is written."""

    async def connect(self) -> None:
        self.job_id = int(self.scope["url_route"]["kwargs"]["job_id"])
        self.log_attempt: int | None = None  # the attempt whose log the page shows
        self.log_after: int | None = None  # last chunk id sent for it
        self.log_coalescer = Coalescer(lambda: self.push(self.refresh_log), DEBOUNCE_S)
        self.log_lock = asyncio.Lock()  # one log read at a time, so no line is sent twice
        self.progress_coalescer = Coalescer(lambda: self.push(self.refresh_progress), DEBOUNCE_S)
        await super().connect()

    async def disconnect(self, code: int) -> None:
        self.log_coalescer.cancel()
        self.progress_coalescer.cancel()
        await super().disconnect(code)

    def group_name(self) -> str:
        return realtime.job_group(self.job_id)

    async def authorize(self, user) -> bool:  # noqa: ANN001
        return await database_sync_to_async(job_page.job_for)(user, self.job_id) is not None

    async def refresh(self) -> None:
        state = await database_sync_to_async(self._state)()
        if state is None:  # the job went away (deleted by an admin)
            await self.close(code=CLOSE_NOT_FOUND)
            return
        await self.send_json({"type": "job", "state": state})
        await self.refresh_log()
        await self.refresh_progress()

    async def refresh_progress(self) -> None:
        """The job's progress (jobprogress.selectors.job_progress); nothing before its first report."""
        from jobprogress.selectors import job_progress

        progress = await database_sync_to_async(job_progress)(self.job_id)
        if progress is not None:
            await self.send_json({"type": "progress", "progress": progress})

    def _state(self) -> dict | None:
        job = job_page.job_for(self.scope["user"], self.job_id)
        return job_page.job_state(job) if job is not None else None

    async def refresh_log(self) -> None:
        async with self.log_lock:
            await self._send_new_log_lines()

    async def _send_new_log_lines(self) -> None:
        latest = await database_sync_to_async(self._latest_attempt)()
        if latest is None:
            return
        reset = latest != self.log_attempt
        after = None if reset else self.log_after
        lines, last, truncated = await database_sync_to_async(job_page.log_chunks_after)(
            self.job_id, latest, after
        )
        if not reset and not lines:
            return
        self.log_attempt, self.log_after = latest, last
        # More lines arrived than a page shows: the page starts again from the newest, marked as cut.
        reset = reset or truncated
        await self.send_json({"type": "log", "attempt": latest, "lines": lines, "reset": reset, "truncated": truncated})

    def _latest_attempt(self) -> int | None:
        from scheduler.models import Attempt

        return Attempt.objects.filter(job_id=self.job_id).order_by("-number").values_list("number", flat=True).first()

    async def jobs_changed(self, message: dict) -> None:
        # The group is shared by a shard of jobs (realtime.job_group): act on ours only.
        if self.job_id in message.get("job_ids", ()):
            self.coalescer.poke()

    async def job_log(self, message: dict) -> None:
        if message.get("job_id") == self.job_id:
            self.log_coalescer.poke()

    async def job_progress(self, message: dict) -> None:
        if message.get("job_id") == self.job_id:
            self.progress_coalescer.poke()
