"""Helpers for tests of confined jobs: real POSIX users, a supervisor that confines, a real image.

Confinement needs root (setuid, cgroups); without it these helpers skip the
test, and fail it under CI=true, where the suite runs as root.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from cluster import protocol
from cluster.agent import confinement
from cluster.agent.supervisor import Supervisor
from tests.cluster.agent.agent_testlib import kill_group, wait_until

# Two unprivileged users of the test machine; created on first use (uids >= 1000).
USER_A, USER_B = "gpusched-test-a", "gpusched-test-b"
# --format=tar: the build writes to a temporary name without ".tar", from which mmdebstrap's automatic
# choice would make a directory.
IMAGE_COMMAND = ["mmdebstrap", "--variant=minbase", "--format=tar", "--include=python3-minimal", "bookworm"]
ENV_IMAGE_CACHE = "GPUSCHED_TEST_IMAGE_CACHE"


def unavailable(message: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message} (CI=true: confinement tests must run)", pytrace=False)
    pytest.skip(message)


def ensure_users() -> tuple[pwd.struct_passwd, pwd.struct_passwd]:
    """The two test users, created with useradd when missing."""
    if os.geteuid() != 0:
        unavailable("confinement tests need root (setuid, cgroups)")
    entries = []
    for name in (USER_A, USER_B):
        try:
            entries.append(pwd.getpwnam(name))
            continue
        except KeyError:
            pass
        if shutil.which("useradd") is None:
            unavailable("useradd is not installed")
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", "--key", "UID_MIN=1000", name],
                       check=True, capture_output=True)
        entries.append(pwd.getpwnam(name))
    return entries[0], entries[1]


def build_test_image() -> tuple[Path, str]:
    """(tarball, "sha256:<hex>") of a minimal Debian root filesystem with python3, built once and cached.

    The cache is $GPUSCHED_TEST_IMAGE_CACHE or the system temp dir, keyed by the build command.
    """
    if shutil.which("mmdebstrap") is None:
        unavailable("mmdebstrap is not installed (apt-get install mmdebstrap)")
    key = hashlib.sha256(" ".join(IMAGE_COMMAND).encode()).hexdigest()[:16]
    cache = Path(os.environ.get(ENV_IMAGE_CACHE) or Path(tempfile.gettempdir()) / "gpusched-test-images")
    tarball = cache / f"rootfs-{key}.tar"
    if not tarball.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        partial = tarball.with_suffix(f".partial-{os.getpid()}")
        done = subprocess.run([*IMAGE_COMMAND, str(partial)], capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            partial.unlink(missing_ok=True)
            unavailable(f"mmdebstrap could not build the test image: {done.stderr.strip()[-400:]}")
        os.replace(partial, tarball)
    os.chmod(cache, 0o755)
    os.chmod(tarball, 0o644)
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    return tarball, f"sha256:{digest}"


class ConfinedNode:
    """A supervisor that confines like a root agent (real shim, real users, real cgroups), driven by hand."""

    def __init__(self, name: str = "iso", gpus: int = 2, pids_max: int = 256) -> None:
        # Not under pytest's tmp_path: its parents are root's 0700, and the jobs' users must reach their dirs.
        tmp = Path(tempfile.mkdtemp(prefix=f"gpusched-{name}-"))
        os.chmod(tmp, 0o711)
        self.tmp = tmp
        self.reports: list[tuple[str, dict[str, Any]]] = []
        conf = confinement.build(name, tmp / "work", single_user=False, min_uid=1000, pids_max=pids_max,
                                 image_cache=tmp / "images")
        self.sup = Supervisor(node=name, workdir=tmp / "work", checkpoint_root=tmp / "ckpt", gpu_count=gpus,
                              emit=lambda task, kw: self.reports.append((task, kw)),
                              base_env={"PATH": "/usr/local/bin:/usr/bin:/bin"}, confinement=conf)

    def launch(self, job: str, command: str, user: str = USER_A, attempt: int = 1, **fields: Any) -> str:
        """The launch's outcome: "started" or "failed", once a launch that waits for its image is started
        or refused by a later step."""
        cmd = protocol.LaunchCommand(job_id=job, attempt=attempt, command=command, run_as=user, **fields)
        result = self.sup.launch(cmd.to_kwargs())
        if result != "waiting":
            return result
        wait_until(lambda: (self.step(), (job, attempt) not in self.sup.pending.waiting)[1], what=f"{job}'s image")
        started = [kw for kw in self.of(protocol.REPORT_STARTED, job) if kw["attempt"] == attempt]
        return "started" if started else "failed"

    def step(self) -> None:
        self.sup.tick()
        self.sup.stream_logs()

    def of(self, task: str, job: str) -> list[dict[str, Any]]:
        return [kw for t, kw in self.reports if t == task and kw.get("job_id") == job]

    def exited(self, job: str) -> dict[str, Any]:
        def ended():
            self.step()
            return next(iter(self.of(protocol.REPORT_EXITED, job)), None)

        return wait_until(ended, what=f"{job} to end")

    def lines(self, job: str) -> list[str]:
        return [line for kw in self.of(protocol.REPORT_LOG, job) for line in kw["lines"]]

    def wait_line(self, job: str, text: str) -> None:
        def seen():
            self.step()
            return any(text in line for line in self.lines(job))

        wait_until(seen, what=f"{text!r} in {job}'s log")

    def pgid(self, job: str) -> int:
        return self.of(protocol.REPORT_STARTED, job)[0]["pid"]

    def cleanup(self) -> None:
        for att in list(self.sup.attempts.values()):
            kill_group(att.pgid)
        cgroups = self.sup.cgroups
        if cgroups is not None:
            for job, attempt in cgroups.existing():
                cgroups.attempt(job, attempt).remove()
            for base in cgroups.bases.values():
                for _ in range(20):
                    try:
                        base.rmdir()
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.05)
        shutil.rmtree(self.tmp, ignore_errors=True)


def broker_url() -> str:
    """The agent tests' Redis (AGENT_TEST_REDIS_URL, else the test Redis with database 3); skips if unreachable."""
    from urllib.parse import urlparse

    import redis

    url = os.environ.get("AGENT_TEST_REDIS_URL")
    if not url:
        base = os.environ.get("TEST_REDIS_URL") or os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
        url = urlparse(base)._replace(path="/3").geturl()
    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        unavailable(f"Redis at {url} unreachable ({exc})")
    return url


class ConfinedAgent:
    """A real agent process that confines (not single-user), with a work dir its jobs' users can traverse."""

    def __init__(self) -> None:
        from tests.cluster.agent.agent_testlib import Node

        self.tmp = Path(tempfile.mkdtemp(prefix="gpusched-agent-"))
        os.chmod(self.tmp, 0o711)
        self.node = Node(broker_url(), self.tmp, [])
        self.node.single_user = False

    def cleanup(self) -> None:
        from cluster.agent.cgroup_tree import CgroupTree

        self.node.cleanup()
        tree, _ = CgroupTree.detect(confinement.tree_name(self.node.name, self.node.workdir))
        if tree is not None:
            for job, attempt in tree.existing():
                tree.attempt(job, attempt).remove()
            for base in tree.bases.values():
                try:
                    base.rmdir()
                except OSError:
                    pass
        shutil.rmtree(self.tmp, ignore_errors=True)
