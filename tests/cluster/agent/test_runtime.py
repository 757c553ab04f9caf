"""Jobs in an image under bubblewrap, as their user: own root filesystem, PID namespace, bound directories."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cluster import protocol
from cluster.agent.runtime import IMAGE_CHECKPOINT_DIR, IMAGE_WORK_DIR, Bubblewrap
from tests.cluster.agent.confined import ConfinedNode, build_test_image, ensure_users, unavailable


def test_the_bwrap_command_binds_the_job_dirs_and_only_its_own_gpu_nodes(tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl"):
        (dev / name).touch()
    argv = Bubblewrap("bwrap", dev_root=dev).command(rootfs=Path("/img"), work_dir=Path("/w"),
                                                      checkpoint_dir=Path("/c"), gpu_indices=[1])
    pairs = list(zip(argv, argv[1:]))
    assert ("--ro-bind", "/img") in pairs and ("--bind", "/w") in pairs and ("--bind", "/c") in pairs
    assert {"--unshare-pid", "--unshare-ipc"} <= set(argv)
    # The job stays in the attempt's process group (the notice goes there) and outlives bwrap's death from it.
    assert "--new-session" not in argv and "--die-with-parent" not in argv
    bound = [argv[i + 1] for i, a in enumerate(argv) if a == "--dev-bind"]
    assert bound == [str(dev / "nvidia1"), str(dev / "nvidiactl")]
    assert argv[-2:] == ["--chdir", IMAGE_WORK_DIR]


@pytest.fixture
def node():
    ensure_users()
    if shutil.which("bwrap") is None:
        unavailable("bwrap is not installed (apt-get install bubblewrap)")
    confined = ConfinedNode(name="img")
    yield confined
    confined.cleanup()


def test_a_job_runs_in_its_image_as_its_user_in_its_own_pid_namespace(node):
    tarball, digest = build_test_image()
    script = ('id -u; cat /etc/debian_version; echo pids $(ls /proc | grep -c "^[0-9]"); pwd; echo "$CHECKPOINT_DIR";'
              ' echo saved > "$CHECKPOINT_DIR/state"; touch /usr/x 2>/dev/null && echo LEAK-rw || echo ro;'
              ' python3 -c "print(\'python ok\')"')
    assert node.launch("in-image", script, image="debian-mini", image_uri=str(tarball), image_digest=digest) == "started"
    ex = node.exited("in-image")
    lines = node.lines("in-image")
    assert (ex["exit_code"], ex["reason"]) == (0, None), lines
    uid, debian, pids, cwd, ckpt, ro, python = lines
    assert int(uid) == node.sup.checkpoint_root.joinpath("in-image").stat().st_uid != 0
    assert debian.startswith("12")
    assert int(pids.split()[1]) <= 5  # bwrap's init, the shell and ls: none of the host's processes
    assert (cwd, ckpt, ro, python) == (IMAGE_WORK_DIR, IMAGE_CHECKPOINT_DIR, "ro", "python ok")
    assert (node.sup.checkpoint_root / "in-image" / "state").read_text() == "saved\n"


def test_a_corrupt_image_ends_as_image_unavailable(node, tmp_path):
    bad = Path(node.tmp) / "bad.tar"
    bad.write_bytes(b"corrupt")
    assert node.launch("bad-image", "true", image="bad", image_uri=str(bad), image_digest="sha256:" + "1" * 64) == "failed"
    ex = node.exited("bad-image")
    assert ex["reason"] == protocol.EXIT_IMAGE_UNAVAILABLE and "sha256:" in ex["message"]


def test_a_job_in_an_image_gets_the_preemption_notice_and_exits_within_its_grace(node):
    tarball, digest = build_test_image()
    trap = "trap 'echo got-term; exit 143' TERM; echo ready; while true; do sleep 0.1; done"
    assert node.launch("notice", trap, image="debian-mini", image_uri=str(tarball), image_digest=digest,
                       grace_period=60.0) == "started"
    node.wait_line("notice", "ready")
    node.sup.preempt({"job_id": "notice", "attempt": 1, "grace_period": 60.0})
    ex = node.exited("notice")
    assert "got-term" in node.lines("notice")
    assert (ex["exit_code"], ex["reason"], ex["checkpointed"]) == (143, protocol.EXIT_PREEMPT, True)
