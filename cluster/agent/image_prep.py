"""Launches that wait for their image, unpacked in the background while the agent's loop goes on.

The first launch of an image on a node checks the tarball's digest and unpacks it (``images.py``): for
an image of a few gigabytes, minutes. Done in the agent's one loop, that stopped everything else on the
node meanwhile: no heartbeat (the server would declare the node lost after its heartbeat grace and
requeue every job on it), no renewal of the lease (the other jobs' shims would fence them), no preemption
notice or cancel for the node's other jobs. Such a launch now waits here instead, its image unpacked by
a thread of its own (one per image, whatever the number of launches waiting for it), and the supervisor
starts it at the first loop step after the unpack ended, or reports it ended ``image-unavailable``.

A waiting launch counts as the node's (heartbeats list it, so the server does not take its attempt for
lost), is saved with the agent's state (a restarted agent unpacks again and starts it), and is dropped,
reported ended without having run, when it is preempted, cancelled, reconciled away or the agent stops.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from cluster import protocol
from cluster.agent.attempt import Key
from cluster.agent.images import ImageCache

log = logging.getLogger(__name__)


class _Unpack:
    """One image being unpacked by a daemon thread (an agent that exits does not wait for ``tar``; what it
    leaves is a temporary tree, never used: ``images.py``)."""

    def __init__(self, cache: ImageCache, uri: str, digest: str) -> None:
        self.done = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(cache, uri, digest), daemon=True,
                                        name=f"unpack-{digest[-12:]}")
        self._thread.start()

    def _run(self, cache: ImageCache, uri: str, digest: str) -> None:
        try:
            cache.ensure(uri, digest)
        except BaseException as exc:  # reported with the launches that wait for it
            self.error = exc
        finally:
            self.done.set()


class PendingLaunches:
    """The launches of this node waiting for their image; ``cache`` None: images are never waited for
    (a node without a runtime refuses them at launch)."""

    def __init__(self, cache: ImageCache | None) -> None:
        self.cache = cache
        self.waiting: dict[Key, tuple[protocol.LaunchCommand, dict[str, Any]]] = {}
        self._unpacks: dict[str, _Unpack] = {}

    def must_wait(self, cmd: protocol.LaunchCommand) -> bool:
        """Whether ``cmd`` names an image not yet unpacked here."""
        return bool(cmd.image) and self.cache is not None and not self.cache.path_for(cmd.image_digest).is_dir()

    def add(self, cmd: protocol.LaunchCommand, kwargs: Mapping[str, Any]) -> None:
        """Keep ``cmd`` (and the command's ``kwargs``, saved with the state) until its image is unpacked."""
        assert self.cache is not None
        self.waiting[(str(cmd.job_id), cmd.attempt)] = (cmd, dict(kwargs))
        unpack = self._unpacks.get(cmd.image_digest)
        if unpack is None or (unpack.done.is_set() and unpack.error is not None):  # a failed unpack is tried again
            log.info("unpacking image %s (%s) for %s attempt %d; the launch waits for it", cmd.image,
                     cmd.image_digest, cmd.job_id, cmd.attempt)
            self._unpacks[cmd.image_digest] = _Unpack(self.cache, cmd.image_uri, cmd.image_digest)
        else:
            log.info("%s attempt %d waits for image %s, already being unpacked", cmd.job_id, cmd.attempt, cmd.image)

    def ready(self) -> Iterator[tuple[protocol.LaunchCommand, dict[str, Any], BaseException | None]]:
        """Take out every launch whose image's unpack has ended: ``(cmd, kwargs, error or None)``."""
        for key, (cmd, kwargs) in list(self.waiting.items()):
            unpack = self._unpacks.get(cmd.image_digest)
            if unpack is not None and unpack.done.is_set():
                del self.waiting[key]
                yield cmd, kwargs, unpack.error
        wanted = {cmd.image_digest for cmd, _ in self.waiting.values()}
        for digest in [d for d, u in self._unpacks.items() if u.done.is_set() and d not in wanted]:
            del self._unpacks[digest]

    def pop(self, key: Key) -> protocol.LaunchCommand | None:
        """Take out the launch of ``key`` (it will not start); None when none waits."""
        found = self.waiting.pop(key, None)
        return None if found is None else found[0]

    def keys(self) -> list[Key]:
        return list(self.waiting)

    def to_state(self) -> list[dict[str, Any]]:
        return [kwargs for _, kwargs in self.waiting.values()]
