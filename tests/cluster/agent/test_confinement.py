"""What a node can do to confine jobs, decided at start: single-user mode confines nothing and says so; outside
it, an agent that cannot confine refuses to start. (Confined jobs themselves: tests/adversarial/test_adv_isolation.py.)"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from cluster.agent import confinement


def test_single_user_mode_uses_no_cgroups_and_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=confinement.__name__):
        conf = confinement.build("n", tmp_path / "work", single_user=True, min_uid=1000, pids_max=64,
                                 image_cache=tmp_path / "images")
    assert (conf.single_user, conf.cgroups, conf.min_uid, conf.pids_max) == (True, None, 1000, 64)
    assert conf.images is not None and conf.images.root == tmp_path / "images"
    assert "SINGLE-USER MODE" in caplog.text and "NOT isolated" in caplog.text


def test_outside_single_user_mode_an_agent_that_is_not_root_refuses_to_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(confinement.os, "geteuid", lambda: 1000)
    with pytest.raises(confinement.ConfinementUnavailable, match="must run as root.*--single-user"):
        confinement.build("n", tmp_path / "work", single_user=False, min_uid=1000, pids_max=64,
                          image_cache=tmp_path / "images")


def test_the_tree_name_is_the_node_and_its_work_dir(tmp_path: Path) -> None:
    name = confinement.tree_name("gpu-01", tmp_path / "a")
    assert name.startswith("gpu-01.") and len(name) == len("gpu-01.") + 8
    assert confinement.tree_name("gpu-01", tmp_path / "a" / ".." / "a") == name  # the resolved work dir
    assert confinement.tree_name("gpu-01", tmp_path / "b") != name  # two agents of one name never share a tree
