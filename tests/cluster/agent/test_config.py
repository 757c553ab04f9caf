"""The agent's options: names, GPUs, broker, token and work dirs with their environment fallbacks, the report queue,
the advertised address, and the confinement options (single-user mode, minimum uid, pids limit, image cache)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster import protocol
from cluster.agent import config
from cluster.agent.logstream import LogLimits
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


def test_options_defaults_and_environment_fallbacks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    c = config.parse_args(["--name", "gpu-01", "--gpus", "4"], environ={"REDIS_URL": "redis://r:6379/1",
                                                                         protocol.ENV_AGENT_TOKEN: "tok"})
    assert (c.broker, c.token, c.heartbeat, c.log_interval, c.kill_jobs_on_exit) == ("redis://r:6379/1", "tok", 5.0, 0.5, False)
    assert c.workdir == tmp_path / "var" / "agent" / "gpu-01"
    assert c.checkpoint_root == c.workdir / "checkpoints"
    c2 = config.parse_args(["--name", "n", "--gpus", "auto", "--broker", "redis://b/2", "--token", "cli",
                            "--checkpoint-root", str(tmp_path / "shared")],
                           environ={"CELERY_BROKER_URL": "redis://c/0", "REDIS_URL": "redis://r/0"})
    assert (c2.broker, c2.token, c2.checkpoint_root) == ("redis://b/2", "cli", tmp_path / "shared")
    assert config.parse_args(["--name", "n", "--gpus", "1"], environ={"CELERY_BROKER_URL": "redis://c/0",
                                                                     "REDIS_URL": "redis://r/0"}).broker == "redis://c/0"
    shared = config.parse_args(["--name", "n", "--gpus", "1"], environ={config.ENV_CHECKPOINT_ROOT: str(tmp_path / "s")})
    assert shared.checkpoint_root == tmp_path / "s"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--name", "bad/name", "--gpus", "1"], "--name 'bad/name'"),
        (["--name", "gpu-01\n", "--gpus", "1"], "--name 'gpu-01\\n'"),
        (["--name", "n", "--gpus", "1", "--heartbeat", "0"], "--heartbeat must be > 0"),
        (["--name", "n", "--gpus", "1", "--cpus", "many"], "--cpus must be a number"),
        (["--gpus", "1"], "--name"),
        (["--name", "n", "--gpus", "1", "--log-max-lag", "0"], "--log-max-lag: expected a size"),
        (["--name", "n", "--gpus", "1", "--log-final", "²M"], "--log-final: expected a size"),
        (["--name", "n", "--gpus", "1", "--log-stream-limit", "1T"], "--log-stream-limit: expected a size"),
    ],
)
def test_bad_options_name_the_option(argv, message, capsys):
    with pytest.raises(SystemExit):
        config.parse_args(argv, environ={})
    assert message in capsys.readouterr().err


def test_log_limits_are_sizes_in_bytes_or_with_a_unit():
    base = ["--name", "n", "--gpus", "1"]
    limits = config.parse_args([*base, "--log-max-lag", "2M", "--log-stream-limit", "1G", "--log-final", "512k"],
                               environ={}).log_limits
    assert (limits.max_lag_bytes, limits.stream_bytes, limits.final_bytes) == (2 * 2**20, 2**30, 512 * 2**10)
    assert config.parse_args(base, environ={}).log_limits == LogLimits()


def test_report_queue_option():
    assert config.parse_args(["--name", "n", "--gpus", "1"], environ={}).report_queue == protocol.REPORT_QUEUE
    assert config.parse_args(["--name", "n", "--gpus", "1", "--report-queue", "agent-reports"], environ={}).report_queue == "agent-reports"
    with pytest.raises(SystemExit):
        config.parse_args(["--name", "n", "--gpus", "1", "--report-queue", "a b"], environ={})


def test_advertise_address_option() -> None:
    parsed = config.parse_args(["--name", "n", "--gpus", "1", "--advertise-address", "10.1.2.3"], environ={})
    assert parsed.advertise_address == "10.1.2.3"
    assert config.parse_args(["--name", "n", "--gpus", "1"], environ={}).advertise_address == ""  # resolved at start
    with pytest.raises(SystemExit):
        config.parse_args(["--name", "n", "--gpus", "1", "--advertise-address", "a b"], environ={})


def test_default_advertise_address_prefers_the_fqdn_then_the_default_route(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(config.socket, "getfqdn", lambda: "gpu7.cluster.example.org")
    assert config.default_advertise_address("n") == "gpu7.cluster.example.org"

    class Probe:
        def __init__(self, *args: object) -> None:
            pass

        def __enter__(self) -> "Probe":
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def connect(self, where: tuple[str, int]) -> None:
            assert where == config._ROUTE_PROBE

        def getsockname(self) -> tuple[str, int]:
            return ("192.168.7.20", 40000)

    monkeypatch.setattr(config.socket, "getfqdn", lambda: "gpu7")  # not qualified: other nodes may not resolve it
    monkeypatch.setattr(config.socket, "socket", Probe)
    assert config.default_advertise_address("n") == "192.168.7.20"

    def no_route(self: Probe, where: tuple[str, int]) -> None:
        raise OSError("Network is unreachable")

    monkeypatch.setattr(Probe, "connect", no_route)
    assert config.default_advertise_address("n") == "n"
