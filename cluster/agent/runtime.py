"""Container runtimes: how a job's shell is started inside its image.

A runtime turns the unpacked root filesystem and the job's directories into a
command prefix that the shim's child (already running as the job's user, with
no_new_privs) executes in front of ``/bin/sh -c COMMAND``. Implemented:
bubblewrap. Podman and Apptainer fit the same interface (docs/agent.md says
what each needs and why they are not built here).

Inside the image the job's working directory is /gpusched/work and its
CHECKPOINT_DIR /gpusched/checkpoint (the host paths are bound there; the image
cache creates both mount points, since the image's root is read-only).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

IMAGE_WORK_DIR = "/gpusched/work"
IMAGE_CHECKPOINT_DIR = "/gpusched/checkpoint"
# Device nodes every CUDA process needs besides its own /dev/nvidia<N>.
NVIDIA_SHARED_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")


class ContainerRuntime(Protocol):
    name: str

    def command(self, *, rootfs: Path, work_dir: Path, checkpoint_dir: Path, gpu_indices: Sequence[int]) -> list[str]:
        """The argv prefix that runs what follows it inside ``rootfs`` with the job's directories bound in."""


class Bubblewrap:
    """Rootless bubblewrap: run by the job's user after the privilege drop, through an unprivileged user namespace.

    Chosen over running bwrap as root with ``--uid``/``--gid``: the job never
    holds root even inside bwrap's set-up, no setuid binary is involved
    (no_new_privs forbids one anyway), and bwrap needs nothing of the agent.
    It needs unprivileged user namespaces (``user.max_user_namespaces`` > 0).
    """

    name = "bubblewrap"

    def __init__(self, binary: str = "bwrap", dev_root: Path = Path("/dev")) -> None:
        self.binary = binary
        self.dev_root = dev_root

    @classmethod
    def find(cls) -> "Bubblewrap | None":
        binary = shutil.which("bwrap")
        return cls(binary) if binary else None

    def gpu_nodes(self, gpu_indices: Sequence[int]) -> list[str]:
        """The job's own GPU device nodes and the shared NVIDIA ones, those that exist on this host."""
        wanted = [str(self.dev_root / f"nvidia{i}") for i in gpu_indices]
        if gpu_indices:
            wanted += [str(self.dev_root / Path(p).name) for p in NVIDIA_SHARED_NODES]
        return [p for p in wanted if Path(p).exists()]

    def command(self, *, rootfs: Path, work_dir: Path, checkpoint_dir: Path, gpu_indices: Sequence[int]) -> list[str]:
        argv = [
            self.binary,
            "--ro-bind", str(rootfs), "/",
            # No --new-session: the job must stay in the attempt's process group, or the agent's SIGTERM
            # notice would never reach it (it has no terminal to protect: stdin is /dev/null). No
            # --die-with-parent: bwrap dies of that notice at once, and its death would SIGKILL the job
            # before it could checkpoint; the attempt's cgroup, not bwrap, makes sure nothing outlives it.
            "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
            "--bind", str(work_dir), IMAGE_WORK_DIR,
            "--bind", str(checkpoint_dir), IMAGE_CHECKPOINT_DIR,
        ]
        for node in self.gpu_nodes(gpu_indices):
            argv += ["--dev-bind", node, "/dev/" + Path(node).name]
        return [*argv, "--chdir", IMAGE_WORK_DIR]
