"""Jobs in an image under bubblewrap, as their user: own root filesystem, PID namespace, bound directories."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cluster import protocol
from cluster.agent.runtime import IMAGE_CHECKPOINT_DIR, IMAGE_WORK_DIR, Bubblewrap
from tests.cluster.agent.agent_testlib import wait_until
from tests.cluster.agent.confined import USER_A, ConfinedNode, build_test_image, ensure_users, unavailable


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
    lines = [line for line in node.lines("in-image") if not line.startswith("[agent] unpacking image")]
    assert (ex["exit_code"], ex["reason"]) == (0, None), lines
    uid, debian, pids, cwd, ckpt, ro, python = lines
    assert int(uid) == node.sup.checkpoint_root.joinpath("in-image").stat().st_uid != 0
    assert debian.startswith("12")
    assert int(pids.split()[1]) <= 5  # bwrap's init, the shell and ls: none of the host's processes
    assert (cwd, ckpt, ro, python) == (IMAGE_WORK_DIR, IMAGE_CHECKPOINT_DIR, "ro", "python ok")
    assert (node.sup.checkpoint_root / "in-image" / "state").read_text() == "saved\n"


def _image_launch(job: str, command: str, tarball: Path, digest: str) -> dict:
    return protocol.LaunchCommand(job_id=job, attempt=1, command=command, run_as=USER_A, image="debian-mini",
                                  image_uri=str(tarball), image_digest=digest).to_kwargs()


def test_a_launch_waits_for_its_image_while_the_node_goes_on(node):
    """The first launch of an image on a node does not hold the node's loop while the image unpacks: other
    jobs start, heartbeats list the waiting attempt (the server must not take it for lost), a repeat of the
    launch starts nothing twice, and the job starts at a later step."""
    tarball, digest = build_test_image()
    kwargs = _image_launch("big-image", "echo in-image", tarball, digest)
    assert node.sup.launch(kwargs) == "waiting"
    assert ["big-image", 1] in node.sup.running()
    assert node.launch("plain", "echo plain") == "started"
    assert node.sup.launch(kwargs) == "waiting"  # no step yet: still waiting, and not started twice later
    ex = node.exited("big-image")
    assert (ex["exit_code"], node.lines("big-image")) == (0, ["[agent] unpacking image 'debian-mini' on img first",
                                                              "in-image"])
    assert len(node.of(protocol.REPORT_STARTED, "big-image")) == 1 and node.exited("plain")["exit_code"] == 0


def test_a_launch_stopped_while_its_image_unpacks_never_runs(node):
    tarball, digest = build_test_image()
    assert node.sup.launch(_image_launch("doomed", "echo RAN", tarball, digest)) == "waiting"
    assert node.sup.kill({"job_id": "doomed", "attempt": 1, "grace_period": 0.0, "reason": "cancel"})
    ex = node.exited("doomed")
    assert (ex["reason"], ex["exit_code"], "it never ran" in ex["message"]) == (protocol.EXIT_CANCEL, None, True)
    wait_until(lambda: (node.step(), node.sup.launcher.confinement.images.path_for(digest).is_dir())[1],
               what="the image to be unpacked")
    node.step()
    assert node.of(protocol.REPORT_STARTED, "doomed") == [] and "RAN" not in node.lines("doomed")
    assert ["doomed", 1] not in node.sup.running()


def test_a_launch_waiting_for_its_image_is_kept_across_an_agent_restart(node):
    tarball, digest = build_test_image()
    assert node.sup.launch(_image_launch("kept", "echo after-restart", tarball, digest)) == "waiting"
    state = node.sup.to_state()
    node.sup.pending.waiting.clear()  # the agent process is gone; the next one restores its saved state
    node.sup.restore(state)
    assert ["kept", 1] in node.sup.running()
    assert node.exited("kept")["exit_code"] == 0 and node.lines("kept")[-1] == "after-restart"


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
