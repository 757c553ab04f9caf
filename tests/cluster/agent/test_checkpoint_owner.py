"""Checkpoint directories claimed per cluster: another cluster's set aside before a job with its id
starts, an unclaimed one (from before the claims) kept, and nothing done without a cluster id."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from cluster.agent.checkpoint_owner import PREVIOUS, TAGS, claim, owner

A = "6f1c9a52-0a7e-4c1b-9d59-0d5f0a0e7a11"
B = "0b8e3c1d-7f22-4e0a-a1d1-5c7e2f9b4d02"


def checkpoint(root: Path, job: str, content: str) -> None:
    (root / job).mkdir(parents=True, exist_ok=True)
    (root / job / "model.pt").write_text(content)


def test_an_unclaimed_directory_is_claimed_as_it_is(tmp_path):
    checkpoint(tmp_path, "7", "made before agents claimed directories")
    assert claim(tmp_path, "7", A) is None
    assert (tmp_path / "7" / "model.pt").read_text() == "made before agents claimed directories"
    assert owner(tmp_path, "7") == A


def test_the_same_cluster_keeps_its_job_s_checkpoints(tmp_path):
    claim(tmp_path, "7", A)
    checkpoint(tmp_path, "7", "step 100")
    assert claim(tmp_path, "7", A) is None
    assert (tmp_path / "7" / "model.pt").read_text() == "step 100"


def test_another_cluster_s_directory_is_set_aside_before_a_job_with_its_id_starts(tmp_path):
    claim(tmp_path, "7", A)
    checkpoint(tmp_path, "7", "job 7 of cluster A")
    moved = claim(tmp_path, "7", B)
    assert moved is not None and moved.parent == tmp_path / PREVIOUS / A and moved.name.startswith("7-")
    assert (moved / "model.pt").read_text() == "job 7 of cluster A"
    assert not (tmp_path / "7").exists() and owner(tmp_path, "7") == B
    for private in (tmp_path / TAGS, tmp_path / PREVIOUS, tmp_path / PREVIOUS / A):
        assert stat.S_IMODE(private.stat().st_mode) == 0o700
    assert claim(tmp_path, "8", B) is None  # other jobs are untouched


@pytest.mark.parametrize("cluster_id", [None, "", "../escape", "a/b", 7, "x" * 65])
def test_without_a_usable_cluster_id_nothing_is_claimed_or_moved(tmp_path, cluster_id):
    claim(tmp_path, "7", A)
    checkpoint(tmp_path, "7", "kept")
    assert claim(tmp_path, "7", cluster_id) is None
    assert (tmp_path / "7" / "model.pt").read_text() == "kept" and owner(tmp_path, "7") == A


def test_a_directory_another_node_already_moved_is_no_error(tmp_path):
    claim(tmp_path, "7", A)
    assert claim(tmp_path, "7", B) is None  # job 7 of A never wrote a checkpoint: nothing to move
    assert owner(tmp_path, "7") == B


def test_a_job_of_a_new_cluster_starts_with_an_empty_checkpoint_dir(h):
    base = {"command": 'ls -A "$CHECKPOINT_DIR"; echo old > "$CHECKPOINT_DIR/step"', "gpu_indices": []}
    h.sup.launch({"job_id": "5", "attempt": 1, **base, "cluster_id": A})
    h.exited("5")
    h.sup.launch({"job_id": "5", "attempt": 2, **base, "cluster_id": B})
    h.exited("5", 2)
    assert h.lines("5", 2) == []  # the file of cluster A's job 5 is not in cluster B's job 5's directory
    assert [p.read_text() for p in (h.sup.checkpoint_root / PREVIOUS / A).glob("5-*/step")] == ["old\n"]
