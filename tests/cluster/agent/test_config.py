"""The agent's confinement options: single-user mode, minimum uid, pids limit, image cache, passed variables."""

from __future__ import annotations

from pathlib import Path

from cluster.agent.config import ENV_SINGLE_USER, parse_args

BASE = ["--name", "n", "--gpus", "1", "--workdir", "/srv/agent"]


def test_a_default_agent_confines_with_the_documented_defaults():
    config = parse_args(BASE, {})
    assert (config.single_user, config.min_uid, config.pids_max, config.pass_env) == (False, 1000, 4096, ())
    assert config.image_cache == Path("/srv/agent/images")


def test_single_user_mode_by_flag_or_variable():
    assert parse_args([*BASE, "--single-user"], {}).single_user
    assert parse_args(BASE, {ENV_SINGLE_USER: "1"}).single_user
    assert not parse_args(BASE, {ENV_SINGLE_USER: "0"}).single_user


def test_confinement_options_are_parsed():
    config = parse_args([*BASE, "--min-uid", "5000", "--pids-max", "64", "--image-cache", "/cache",
                         "--pass-env", "HTTP_PROXY", "--pass-env", "OPENBLAS_CORETYPE", "--pass-env", "HTTP_PROXY"], {})
    assert (config.min_uid, config.pids_max, config.image_cache) == (5000, 64, Path("/cache"))
    assert config.pass_env == ("HTTP_PROXY", "OPENBLAS_CORETYPE")
