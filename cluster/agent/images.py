"""Job images: root filesystem tarballs, verified by digest and unpacked once per node.

An image is registered on the server as a name, the path of a root filesystem
tarball on storage every node can read (``image_uri``) and the tarball's
sha256 (``image_digest``). The first launch that names it on a node checks the
tarball's sha256, unpacks it with ``tar`` into ``<cache>/<hex>.tmp-<pid>``,
adds the mount points the runtime binds the job's directories to, and renames
the result to ``<cache>/<hex>`` (so a half-unpacked image is never used; an
agent killed mid-unpack leaves only a ``.tmp-<pid>`` directory, removed by the
next unpack of that image once no process has that pid). Later launches use the cached tree. The cache is root's (0700 above the
trees); the unpacked trees keep their own modes, so jobs can read them through
the runtime's bind mount.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
from pathlib import Path

log = logging.getLogger(__name__)

UNPACK_TIMEOUT = 600.0
# Mount points the runtime binds the job's working and checkpoint directories to (see runtime.py).
MOUNT_POINTS = ("gpusched/work", "gpusched/checkpoint")


class ImageUnavailable(OSError):
    """The image cannot be used on this node; the message says why (missing, digest mismatch, unpack error)."""


def sha256_of(path: Path) -> str:
    """``sha256:<hex>`` of the file at ``path``."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return f"sha256:{digest.hexdigest()}"


class ImageCache:
    """Unpacked images of this node under ``root``, keyed by digest."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path_for(self, digest: str) -> Path:
        return self.root / digest.removeprefix("sha256:")

    def ensure(self, uri: str, digest: str) -> Path:
        """The unpacked root filesystem of the tarball ``uri`` with sha256 ``digest``; unpacks it if needed.

        Raises ImageUnavailable when the tarball is missing or unreadable, its
        digest differs, or it does not unpack into a root filesystem.
        """
        target = self.path_for(digest)
        if target.is_dir():
            return target
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)
        tarball = Path(uri)
        try:
            actual = sha256_of(tarball)
        except OSError as exc:
            raise ImageUnavailable(f"cannot read {uri}: {exc.strerror or exc}") from None
        if actual != digest:
            raise ImageUnavailable(f"{uri} has digest {actual}, not the registered {digest}")
        self._remove_abandoned(target.name)
        tmp = self.root / f"{target.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        os.chmod(tmp, 0o755)  # explicit: the agent's umask is 077, and the job's user must enter the tree
        try:
            self._unpack(tarball, tmp)
        except ImageUnavailable:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        os.replace(tmp, target)
        log.info("image %s unpacked into %s", digest, target)
        return target

    def _remove_abandoned(self, name: str) -> None:
        """Remove the temporary trees of ``name`` left by agents killed mid-unpack (their pid no longer runs):
        each is as large as the image, and nothing else would ever remove them."""
        for tmp in self.root.glob(f"{name}.tmp-*"):
            pid = tmp.name.rpartition("-")[2]
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                shutil.rmtree(tmp, ignore_errors=True)
            except PermissionError:
                pass  # a running process of another user: maybe unpacking still

    @staticmethod
    def _unpack(tarball: Path, into: Path) -> None:
        try:
            done = subprocess.run(
                ["tar", "--extract", "--numeric-owner", "--preserve-permissions", "--file", str(tarball),
                 "--directory", str(into)],
                capture_output=True, text=True, timeout=UNPACK_TIMEOUT,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ImageUnavailable(f"cannot unpack {tarball}: {exc}") from None
        if done.returncode != 0:
            raise ImageUnavailable(f"cannot unpack {tarball}: {done.stderr.strip()[-500:]}")
        if not (into / "bin" / "sh").exists() and not (into / "usr" / "bin" / "sh").exists():
            raise ImageUnavailable(f"{tarball} is not a root filesystem (no /bin/sh in it)")
        for mount_point in MOUNT_POINTS:
            (into / mount_point).mkdir(parents=True, exist_ok=True)
            for level in (into / mount_point, (into / mount_point).parent):
                os.chmod(level, 0o755)
