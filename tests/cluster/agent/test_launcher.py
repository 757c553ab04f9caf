"""Starting an attempt: a launch that cannot start (no such GPU, no usable work dir) fails with its reason."""

from __future__ import annotations

from cluster import protocol


def test_bad_gpu_index_fails_the_launch_with_a_log_line(h):
    assert h.launch("g", 1, "true", gpu_indices=[4]) == "failed"
    ex = h.of(protocol.REPORT_EXITED, job_id="g")[0]
    assert ex["reason"] == protocol.EXIT_LAUNCH_FAILED
    assert h.lines("g") == ["[agent] gpu_indices [4] do not exist: node unit has 4 GPUs"]
    assert h.of(protocol.REPORT_STARTED) == []


def test_unusable_workdir_fails_the_launch(h, tmp_path):
    (tmp_path / "work").write_text("a file where the work dir should be")
    assert h.launch("w", 1, "true") == "failed"
    assert h.of(protocol.REPORT_EXITED, job_id="w")[0]["reason"] == protocol.EXIT_LAUNCH_FAILED
