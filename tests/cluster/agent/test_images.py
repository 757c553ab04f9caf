"""The image cache: digest checked before unpacking, unpacked once, refusals with a message."""

from __future__ import annotations

import io
import os
import stat
import tarfile

import pytest

from cluster.agent.images import MOUNT_POINTS, ImageCache, ImageUnavailable, sha256_of
from tests.cluster.agent.confined import build_test_image


def _tar(path, members: dict[str, bytes]) -> str:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755
            tar.addfile(info, io.BytesIO(data))
    return sha256_of(path)


def test_a_real_image_is_unpacked_once_with_its_mount_points(tmp_path):
    tarball, digest = build_test_image()
    cache = ImageCache(tmp_path / "cache")
    old_umask = os.umask(0o077)  # the agent's
    try:
        root = cache.ensure(str(tarball), digest)
    finally:
        os.umask(old_umask)
    # The job's user must be able to enter the tree and the mount points whatever the agent's umask.
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o755 for p in (root, root / "gpusched", root / MOUNT_POINTS[0]))
    assert (root / "usr" / "bin" / "python3").exists()
    assert all((root / m).is_dir() for m in MOUNT_POINTS)
    marker = root / "gpusched" / "unpacked-once"
    marker.touch()
    assert cache.ensure(str(tarball), digest) == root and marker.exists()


def test_a_digest_mismatch_is_refused_before_unpacking(tmp_path):
    tarball = tmp_path / "img.tar"
    _tar(tarball, {"bin/sh": b"#!"})
    with pytest.raises(ImageUnavailable, match="not the registered"):
        ImageCache(tmp_path / "cache").ensure(str(tarball), "sha256:" + "0" * 64)
    assert not any((tmp_path / "cache").iterdir())


def test_a_missing_tarball_is_unavailable_with_its_path(tmp_path):
    with pytest.raises(ImageUnavailable, match="/nonexistent/x.tar"):
        ImageCache(tmp_path / "cache").ensure("/nonexistent/x.tar", "sha256:" + "0" * 64)


def test_a_tarball_that_is_not_a_root_filesystem_or_not_a_tarball_is_refused_and_nothing_is_cached(tmp_path):
    cache = ImageCache(tmp_path / "cache")
    tarball = tmp_path / "data.tar"
    digest = _tar(tarball, {"data/file.txt": b"hello"})
    with pytest.raises(ImageUnavailable, match="not a root filesystem"):
        cache.ensure(str(tarball), digest)
    garbage = tmp_path / "garbage.tar"
    garbage.write_bytes(b"not a tarball at all" * 100)
    with pytest.raises(ImageUnavailable, match="cannot unpack"):
        cache.ensure(str(garbage), sha256_of(garbage))
    assert list(cache.root.iterdir()) == []


def test_a_tree_left_by_an_agent_killed_mid_unpack_is_removed_by_the_next_unpack(tmp_path):
    """A temporary tree whose pid no longer runs is removed; one of a running process is kept."""
    import subprocess

    tarball = tmp_path / "img.tar"
    digest = _tar(tarball, {"bin/sh": b"#!"})
    cache = ImageCache(tmp_path / "cache")
    cache.root.mkdir()
    child = subprocess.Popen(["true"])  # its pid, once it has ended, is that of an agent gone
    child.wait()
    hexname = digest.removeprefix("sha256:")
    abandoned = cache.root / f"{hexname}.tmp-{child.pid}"
    alive = cache.root / f"{hexname}.tmp-1"  # pid 1 runs
    for tree in (abandoned, alive):
        (tree / "usr").mkdir(parents=True)
    cache.ensure(str(tarball), digest)
    assert not abandoned.exists() and alive.exists() and cache.path_for(digest).is_dir()
