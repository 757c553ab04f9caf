"""What this node can do to confine jobs, decided once when the agent starts.

A node confines every job (its owner's identity, a cgroup per attempt, an
image when the launch names one) or, in single-user mode, runs every job as
the agent's own user. An agent that cannot confine (not root, no cgroup
controllers) refuses to start unless single-user mode is on: it never runs
someone's job unconfined by accident.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from cluster.agent.cgroup_tree import CgroupTree
from cluster.agent.cgroups import DEFAULT_PIDS_MAX
from cluster.agent.identity import DEFAULT_MIN_UID
from cluster.agent.images import ImageCache
from cluster.agent.runtime import Bubblewrap, ContainerRuntime

log = logging.getLogger(__name__)


def tree_name(node: str, workdir: Path) -> str:
    """``<node>.<8 hex of the work dir>``: the work dir is the agent's identity (one agent per work dir), so a
    restarted agent finds its attempts' cgroups and two agents of one name on a host never share a tree."""
    return f"{node}.{hashlib.sha256(str(workdir.resolve()).encode()).hexdigest()[:8]}"


class ConfinementUnavailable(RuntimeError):
    """Jobs cannot be confined on this node and single-user mode is off."""


@dataclass(frozen=True)
class Confinement:
    """How this node confines jobs. ``single_user``: every job runs as the agent's user (no identity switch)."""

    single_user: bool = True
    min_uid: int = DEFAULT_MIN_UID
    pids_max: int = DEFAULT_PIDS_MAX
    cgroups: CgroupTree | None = None
    images: ImageCache | None = None
    runtime: ContainerRuntime | None = None


def build(node: str, workdir: Path, *, single_user: bool, min_uid: int, pids_max: int, image_cache: Path) -> Confinement:
    """The node's confinement; raises ConfinementUnavailable when it cannot confine outside single-user mode.

    Single-user mode uses no cgroups either: it is the unconfined mode of a
    laptop or a demo, and behaves there as it does without root.
    """
    runtime = Bubblewrap.find()
    if single_user:
        log.warning("SINGLE-USER MODE: every job runs as this agent's user (uid %d), whatever its owner, without "
                    "cgroups; jobs are NOT isolated from each other or from this agent. Never use this mode on a "
                    "shared cluster.", os.getuid())
        return Confinement(single_user=True, min_uid=min_uid, pids_max=pids_max, images=ImageCache(image_cache),
                           runtime=runtime)
    if os.geteuid() != 0:
        raise ConfinementUnavailable("the agent must run as root to run jobs as their owners "
                                     "(or start it with --single-user to run every job as this user, unconfined)")
    cgroups, how = CgroupTree.detect(tree_name(node, workdir))
    if cgroups is None:
        raise ConfinementUnavailable(f"no usable cgroups ({how}); jobs cannot be confined "
                                     "(start with --single-user to run them unconfined)")
    log.info("attempt cgroups: %s", how)
    if runtime is None:
        log.warning("bwrap (bubblewrap) not found: launches that name an image will fail as image-unavailable")
    return Confinement(single_user=False, min_uid=min_uid, pids_max=pids_max, cgroups=cgroups,
                       images=ImageCache(image_cache), runtime=runtime)
