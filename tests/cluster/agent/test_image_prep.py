"""Launches waiting for their image: one unpack per image however many wait, started when it ends, tried
again after a failure. The unpack itself is ``ImageCache.ensure`` (tests/cluster/agent/test_images.py);
here a cache whose unpack ends when the test says so. The supervisor's use, with real images under
bubblewrap: tests/cluster/agent/test_runtime.py."""

from __future__ import annotations

import threading
from pathlib import Path

from cluster import protocol
from cluster.agent.image_prep import PendingLaunches
from cluster.agent.images import ImageCache, ImageUnavailable
from tests.cluster.agent.agent_testlib import wait_until

DIGEST = "sha256:" + "a" * 64


class HeldCache(ImageCache):
    """Unpacks (makes the image's directory) once ``release`` is set, or fails with ``fail``; counts unpacks."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.release = threading.Event()
        self.fail: str | None = None
        self.unpacks = 0

    def ensure(self, uri: str, digest: str) -> Path:
        self.unpacks += 1
        self.release.wait(10)
        if self.fail:
            raise ImageUnavailable(self.fail)
        self.path_for(digest).mkdir(parents=True)
        return self.path_for(digest)


def _cmd(job: str, image: str = "img") -> protocol.LaunchCommand:
    return protocol.LaunchCommand(job_id=job, attempt=1, command="true", image=image, image_uri="/images/i.tar",
                                  image_digest=DIGEST)


def _settled(pending: PendingLaunches) -> list:
    """Wait until some launch is ready, then every launch taken out."""
    found: list = []
    wait_until(lambda: found.extend(pending.ready()) or found, what="a launch to be ready")
    return found


def test_launches_of_one_image_share_one_unpack_and_are_ready_when_it_ends(tmp_path):
    cache = HeldCache(tmp_path / "images")
    pending = PendingLaunches(cache)
    assert pending.must_wait(_cmd("a")) and not pending.must_wait(protocol.LaunchCommand(job_id="p", attempt=1,
                                                                                          command="true"))
    pending.add(_cmd("a"), {"job_id": "a"})
    pending.add(_cmd("b"), {"job_id": "b"})
    assert list(pending.ready()) == [] and sorted(pending.keys()) == [("a", 1), ("b", 1)]
    cache.release.set()
    ready = _settled(pending)
    assert [(cmd.job_id, kwargs, error) for cmd, kwargs, error in ready] == [("a", {"job_id": "a"}, None),
                                                                          ("b", {"job_id": "b"}, None)]
    assert cache.unpacks == 1 and pending.keys() == [] and not pending.must_wait(_cmd("c"))


def test_a_failed_unpack_fails_its_launches_and_a_later_launch_tries_again(tmp_path):
    cache = HeldCache(tmp_path / "images")
    cache.fail = "digest mismatch"
    cache.release.set()
    pending = PendingLaunches(cache)
    pending.add(_cmd("a"), {})
    [(cmd, _, error)] = _settled(pending)
    assert cmd.job_id == "a" and isinstance(error, ImageUnavailable) and "digest mismatch" in str(error)
    cache.fail = None
    pending.add(_cmd("b"), {})
    [(cmd, _, error)] = _settled(pending)
    assert (cmd.job_id, error, cache.unpacks) == ("b", None, 2)


def test_a_launch_taken_out_is_never_ready_and_the_state_lists_those_waiting(tmp_path):
    cache = HeldCache(tmp_path / "images")
    pending = PendingLaunches(cache)
    pending.add(_cmd("gone"), {"job_id": "gone"})
    pending.add(_cmd("kept"), {"job_id": "kept"})
    assert pending.pop(("gone", 1)).job_id == "gone" and pending.pop(("gone", 1)) is None
    assert pending.to_state() == [{"job_id": "kept"}]
    cache.release.set()
    assert [cmd.job_id for cmd, _, _ in _settled(pending)] == ["kept"]


def test_without_a_runtime_nothing_waits(tmp_path):
    assert not PendingLaunches(None).must_wait(_cmd("a"))
