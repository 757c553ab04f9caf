"""Unit tests of the agent's pure parts: contract validation, message decoding,
log tailing, state file, resources, options and the job environment."""

from __future__ import annotations

import json
import sys
import types
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from cluster import protocol
from cluster.agent import config, jobenv, logtail, messages, resources, statefile

# ----- LaunchCommand --------------------------------------------------------------


def test_launch_command_round_trips_through_kwargs():
    cmd = protocol.LaunchCommand(job_id="j-1", attempt=2, command="python t.py", gpu_indices=(3, 1),
                                 grace_period=30, time_limit=600.0, env={"A": "1"}, resume=True)
    assert protocol.LaunchCommand.from_kwargs(json.loads(json.dumps(cmd.to_kwargs()))) == protocol.LaunchCommand(
        job_id="j-1", attempt=2, command="python t.py", gpu_indices=(3, 1), grace_period=30.0,
        time_limit=600.0, env={"A": "1"}, resume=True,
    )


def test_launch_command_defaults_and_ignores_unknown_fields():
    cmd = protocol.LaunchCommand.from_kwargs({"job_id": 5, "attempt": 0, "command": "true", "future_field": {"tp": 2}})
    assert (cmd.job_id, cmd.gpu_indices, cmd.grace_period, cmd.time_limit, cmd.env, cmd.resume) == (5, (), 0.0, None, {}, False)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"job_id": None}, "job_id"),
        ({"job_id": True}, "job_id"),
        ({"job_id": -1}, "job_id"),
        ({"job_id": "."}, "job_id"),
        ({"job_id": "a/b"}, "job_id"),
        ({"job_id": "x" * 129}, "job_id"),
        ({"attempt": -1}, "attempt"),
        ({"attempt": 1.0}, "attempt"),
        ({"command": ""}, "command"),
        ({"command": "  "}, "command"),
        ({"command": ["ls"]}, "command"),
        ({"gpu_indices": "0,1"}, "gpu_indices"),
        ({"gpu_indices": [0, -1]}, "gpu_indices[1]"),
        ({"gpu_indices": [True]}, "gpu_indices[0]"),
        ({"grace_period": -0.1}, "grace_period"),
        ({"grace_period": float("nan")}, "grace_period"),
        ({"grace_period": "30"}, "grace_period"),
        ({"time_limit": 0}, "time_limit"),
        ({"env": {"1BAD": "x"}}, "env"),
        ({"env": {"A=B": "x"}}, "env"),
        ({"env": {"A": 1}}, "env[A]"),
        ({"env": ["A"]}, "env"),
        ({"resume": "yes"}, "resume"),
    ],
)
def test_launch_command_rejects_bad_fields_by_name(change, field):
    kwargs = {"job_id": "j", "attempt": 1, "command": "true", **change}
    with pytest.raises(protocol.ProtocolError) as err:
        protocol.LaunchCommand.from_kwargs(kwargs)
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")


@pytest.mark.parametrize("missing", ["job_id", "attempt", "command"])
def test_launch_command_requires_its_identity_and_command(missing):
    kwargs = {"job_id": "j", "attempt": 1, "command": "true"}
    del kwargs[missing]
    with pytest.raises(protocol.ProtocolError, match=f"^{missing}: is required"):
        protocol.LaunchCommand.from_kwargs(kwargs)


def test_keep_lists_are_parsed_into_pairs():
    assert protocol.check_keep([["a", 1], [7, 2]]) == {("a", 1), (7, 2)}
    with pytest.raises(protocol.ProtocolError, match=r"^keep\[1\]\[1\]"):
        protocol.check_keep([["a", 1], ["b", "2"]])
    with pytest.raises(protocol.ProtocolError, match="^keep:"):
        protocol.check_keep("a")


# ----- Celery message decoding ----------------------------------------------------------


def test_decodes_protocol_2_and_1_messages():
    assert messages.decode_task({"task": "agent.launch"}, [[], {"a": 1}, {}]) == ("agent.launch", {"a": 1})
    assert messages.decode_task({}, {"task": "agent.kill", "args": [], "kwargs": {"b": 2}}) == ("agent.kill", {"b": 2})


@pytest.mark.parametrize(
    ("headers", "body", "field"),
    [
        ({}, [[], {}, {}], "task"),
        ({"task": "agent.launch"}, {"x": 1}, "body"),
        ({"task": "agent.launch"}, [["pos"], {}, {}], "args"),
        ({"task": "agent.launch"}, [[], ["not", "a", "dict"], {}], "kwargs"),
        ({"task": 3}, [[], {}, {}], "task"),
    ],
)
def test_rejects_messages_that_are_not_keyword_task_calls(headers, body, field):
    with pytest.raises(protocol.ProtocolError) as err:
        messages.decode_task(headers, body)
    assert err.value.field == field


def test_expiry_is_honoured_when_set():
    now = datetime(2030, 1, 1, tzinfo=timezone.utc)
    past, future = (now - timedelta(seconds=1)).isoformat(), (now + timedelta(seconds=1)).isoformat()
    assert messages.is_expired({"expires": past}, [], now)
    assert not messages.is_expired({"expires": future}, [], now)
    assert not messages.is_expired({"expires": None}, [], now)
    assert messages.is_expired({}, {"expires": "2029-12-31T23:59:59"}, now)  # naive = UTC
    with pytest.raises(protocol.ProtocolError, match="^expires"):
        messages.is_expired({"expires": "soon"}, [], now)


# ----- log tailing ----------------------------------------------------------------------------


def test_reads_complete_lines_and_keeps_the_partial_one(tmp_path):
    log = tmp_path / "a.log"
    log.write_bytes(b"one\r\ntwo\nthr")
    lines, offset = logtail.read_new_lines(log, 0, 1024)
    assert (lines, offset) == (["one", "two"], 9)
    assert logtail.read_new_lines(log, offset, 1024) == ([], 9)
    with open(log, "ab") as f:
        f.write(b"ee\n")
    assert logtail.read_new_lines(log, offset, 1024) == (["three"], 15)


def test_final_read_includes_the_partial_line_and_bad_bytes_are_replaced(tmp_path):
    log = tmp_path / "a.log"
    log.write_bytes(b"ok\n\xff\xfeend")
    assert logtail.read_new_lines(log, 3, 1024, final=True) == (["\ufffd\ufffdend"], 8)


def test_read_is_bounded_and_a_runaway_line_is_cut(tmp_path):
    log = tmp_path / "a.log"
    log.write_bytes(b"a\nb\nc\n")
    assert logtail.read_new_lines(log, 0, 4) == (["a", "b"], 4)
    log.write_bytes(b"x" * (logtail.MAX_LINE_BYTES + 10))
    lines, offset = logtail.read_new_lines(log, 0, logtail.MAX_LINE_BYTES)
    assert offset == logtail.MAX_LINE_BYTES and len(lines[0]) == logtail.MAX_LINE_BYTES


def test_missing_log_reads_as_empty(tmp_path):
    assert logtail.read_new_lines(tmp_path / "nope.log", 0, 10) == ([], 0)


# ----- state file and lock -------------------------------------------------------------------


def test_state_round_trip_and_unreadable_state_is_kept_aside(tmp_path):
    path = tmp_path / "agent-state.json"
    assert statefile.load(path) == {}
    statefile.save(path, {"node": "n", "attempts": []})
    assert statefile.load(path) == {"node": "n", "attempts": [], "version": statefile.STATE_VERSION}
    path.write_text("{truncated")
    assert statefile.load(path) == {}
    assert [p.name.startswith("agent-state.json.corrupt-") for p in tmp_path.iterdir()] == [True]


def test_unknown_state_version_is_ignored(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"version": 99, "attempts": [{"x": 1}]}))
    assert statefile.load(path) == {}


def test_workdir_lock_admits_one_agent(tmp_path):
    import os

    fd = statefile.lock_workdir(tmp_path)
    with pytest.raises(statefile.WorkdirBusy, match="another agent"):
        statefile.lock_workdir(tmp_path)
    os.close(fd)
    os.close(statefile.lock_workdir(tmp_path))


# ----- resources -------------------------------------------------------------------------------------


def test_virtual_gpus_from_a_count():
    assert resources.discover_gpus("3") == (("virtual",) * 3, "virtual")
    assert resources.discover_gpus("0") == ((), "virtual")


@pytest.mark.parametrize(("spec", "message"), [("-1", "must not be negative"), ("two", "'auto' or a whole number")])
def test_bad_gpu_spec_is_a_clear_error(spec, message):
    with pytest.raises(ValueError, match=message):
        resources.discover_gpus(spec)


def _fake_pynvml(names: list[str] | None):
    class NVMLError(Exception):
        pass

    mod = types.ModuleType("pynvml")
    mod.NVMLError = NVMLError
    calls = []

    def init():
        if names is None:
            raise NVMLError("Driver Not Loaded")
        calls.append("init")

    mod.nvmlInit = init
    mod.nvmlShutdown = lambda: calls.append("shutdown")
    mod.nvmlDeviceGetCount = lambda: len(names)
    mod.nvmlDeviceGetHandleByIndex = lambda i: i
    mod.nvmlDeviceGetName = lambda h: names[h].encode() if h % 2 else names[h]
    return mod, calls


def test_auto_uses_nvml_models_in_index_order(monkeypatch):
    fake, calls = _fake_pynvml(["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert resources.discover_gpus("auto") == (("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"), "nvml")
    assert calls == ["init", "shutdown"]


@pytest.mark.parametrize("names", [None, []])
def test_auto_without_gpus_says_how_to_declare_virtual_ones(monkeypatch, names):
    fake, _ = _fake_pynvml(names)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with pytest.raises(ValueError, match="--gpus N"):
        resources.discover_gpus("auto")


def test_memory_is_read_from_meminfo(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16384000 kB\nMemFree: 1 kB\n")
    assert resources.detect_mem_gb(meminfo) == 16.8
    assert resources.detect_mem_gb(tmp_path / "missing") == 0.0


def test_declared_cpus_and_memory_override_detection():
    r = resources.discover("2", cpus=8.0, mem_gb=64.0)
    assert (r.gpus, r.cpus, r.mem_gb, r.gpu_source) == (2, 8.0, 64.0, "virtual")


# ----- options -------------------------------------------------------------------------------------------


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
        (["--name", "n", "--gpus", "1", "--heartbeat", "0"], "--heartbeat must be > 0"),
        (["--name", "n", "--gpus", "1", "--cpus", "many"], "--cpus must be a number"),
        (["--gpus", "1"], "--name"),
    ],
)
def test_bad_options_name_the_option(argv, message, capsys):
    with pytest.raises(SystemExit):
        config.parse_args(argv, environ={})
    assert message in capsys.readouterr().err


def test_broker_password_is_not_logged():
    from cluster.agent.__main__ import _redact

    assert _redact("redis://:s3cret@host:6379/0") == "redis://:***@host:6379/0"
    assert _redact("redis://user:pw@host/0") == "redis://user:***@host/0"
    assert _redact("redis://host:6379/0") == "redis://host:6379/0"


# ----- job environment -------------------------------------------------------------------------------------


def test_job_environment_sets_the_contract_last_and_drops_private_variables():
    base = {"PATH": "/bin", protocol.ENV_AGENT_TOKEN: "t", "REDIS_URL": "redis://:pw@h/0", "CELERY_BROKER_URL": "x"}
    cmd = protocol.LaunchCommand(job_id=9, attempt=2, command="x", gpu_indices=(2, 0), grace_period=30.0,
                                 env={"CUDA_VISIBLE_DEVICES": "spoof", "LR": "0.1", "PYTHONUNBUFFERED": "0"}, resume=True)
    env = jobenv.job_environment(base, cmd, node="n1", checkpoint_dir=Path("/ck/9"))
    assert env == {
        "PATH": "/bin", "PYTHONUNBUFFERED": "0", "LR": "0.1",
        "CUDA_VISIBLE_DEVICES": "2,0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CHECKPOINT_DIR": "/ck/9",
        "RESUME": "1", "GRACE_PERIOD": "30", "GPUSCHED_JOB_ID": "9", "GPUSCHED_ATTEMPT": "2", "GPUSCHED_NODE": "n1",
        # A launch without nodes (an older server): a single-node job mastered here.
        "GPUSCHED_NODES": "n1", "GPUSCHED_NUM_NODES": "1", "GPUSCHED_NODE_RANK": "0",
        "GPUSCHED_MASTER_ADDR": "127.0.0.1", "GPUSCHED_MASTER_PORT": "29565",
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29565", "NNODES": "1", "NODE_RANK": "0",
    }
    first = jobenv.job_environment({}, protocol.LaunchCommand(job_id="a", attempt=1, command="x", grace_period=2.5),
                                   node="n", checkpoint_dir=Path("/c"))
    assert (first["RESUME"], first["GRACE_PERIOD"], first["CUDA_VISIBLE_DEVICES"], first["PYTHONUNBUFFERED"]) == ("0", "2.5", "", "1")


def test_report_queue_option():
    assert config.parse_args(["--name", "n", "--gpus", "1"], environ={}).report_queue == protocol.REPORT_QUEUE
    assert config.parse_args(["--name", "n", "--gpus", "1", "--report-queue", "agent-reports"], environ={}).report_queue == "agent-reports"
    with pytest.raises(SystemExit):
        config.parse_args(["--name", "n", "--gpus", "1", "--report-queue", "a b"], environ={})
