"""The agent's side of sessions: a port and a secret in the job's environment, one report once it answers."""

from __future__ import annotations

import logging
from pathlib import Path

from cluster import protocol, session_contract as contract, session_seal
from cluster.agent.sessions import Sessions, accepts, free_port
from tests.cluster.agent.agent_testlib import PY, Harness

SERVER = (
    f"{PY} -c \"import os, socket, time; s = socket.socket(); "
    "s.bind((os.environ['GPUSCHED_SESSION_HOST'], int(os.environ['GPUSCHED_SESSION_PORT']))); "
    "print('base', os.environ['GPUSCHED_SESSION_BASE_URL'], 'gpus', os.environ['CUDA_VISIBLE_DEVICES'], flush=True); "
    "time.sleep(0.3); s.listen(); time.sleep(60)\""
)


def launch(job: int = 7, kind: str = "terminal") -> protocol.LaunchCommand:
    return protocol.LaunchCommand(job_id=job, attempt=1, command="true", env={contract.ENV_SESSION: kind} if kind else {})


def test_a_batch_launch_is_left_alone() -> None:
    cmd = launch(kind="")
    assert Sessions("127.0.0.1").prepare(cmd) is cmd


def test_a_session_launch_gets_a_free_port_a_fresh_secret_and_its_base_url() -> None:
    sessions = Sessions("127.0.0.1")
    env = sessions.prepare(launch(7)).env
    other = sessions.prepare(launch(8)).env
    assert env[contract.ENV_SESSION_HOST] == "127.0.0.1" and env[contract.ENV_SESSION_BASE_URL] == "/sessions/7/"
    assert 1 <= int(env[contract.ENV_SESSION_PORT]) <= 65535
    assert len(env[contract.ENV_SESSION_SECRET]) >= 32 and env[contract.ENV_SESSION_SECRET] != other[contract.ENV_SESSION_SECRET]
    contract.check_endpoint({"host": "127.0.0.1", "port": int(env[contract.ENV_SESSION_PORT]),
                             "secret": env[contract.ENV_SESSION_SECRET]})


def test_the_report_waits_for_the_port_to_answer_and_is_sent_once() -> None:
    answering: set[int] = set()
    sessions = Sessions("127.0.0.1", probe=lambda host, port: port in answering)
    env = sessions.prepare(launch(7)).env
    port, sent = int(env[contract.ENV_SESSION_PORT]), []
    live = {("7", 1)}
    sessions.poll(live, 1.0, lambda task, kw: sent.append((task, kw)))
    assert sent == []
    answering.add(port)
    sessions.poll(live, 2.0, lambda task, kw: sent.append((task, kw)))
    sessions.poll(live, 3.0, lambda task, kw: sent.append((task, kw)))
    assert sent == [(contract.REPORT_SESSION, {"job_id": 7, "attempt": 1, "host": "127.0.0.1", "port": port,
                                               "secret": env[contract.ENV_SESSION_SECRET]})]


def test_with_the_servers_key_the_report_carries_the_secret_sealed_for_this_node_job_and_attempt_only() -> None:
    key = session_seal.public_key_text("server key")
    sessions = Sessions("127.0.0.1", probe=lambda host, port: True, node="n1")
    cmd = launch(7)
    env = sessions.prepare(protocol.LaunchCommand(job_id=7, attempt=1, command="true",
                                                  env={**cmd.env, contract.ENV_SESSION_REPORT_KEY: key})).env
    assert contract.ENV_SESSION_REPORT_KEY not in env  # the job has no use for it
    secret, sent = env[contract.ENV_SESSION_SECRET], []
    assert sessions.to_state()[0]["report_key"] == key  # a restarted agent still seals
    sessions.poll({("7", 1)}, 1.0, lambda task, kw: sent.append(kw))
    (report,) = sent
    assert "secret" not in report and secret not in repr(report)
    assert session_seal.open_sealed(["server key"], report["sealed_secret"], session_seal.context("n1", 7, 1)) == secret
    assert session_seal.open_sealed(["server key"], report["sealed_secret"], session_seal.context("n2", 7, 1)) is None
    opener = lambda sealed: session_seal.open_sealed(["server key"], sealed, session_seal.context("n1", 7, 1))  # noqa: E731
    assert contract.check_endpoint(report, opener)[2] == secret


def test_a_malformed_key_fails_closed_the_session_is_never_reported(caplog) -> None:  # noqa: ANN001
    sessions = Sessions("127.0.0.1", probe=lambda host, port: True, node="n1")
    sessions.prepare(protocol.LaunchCommand(job_id=7, attempt=1, command="true",
                                            env={contract.ENV_SESSION: "jupyter", contract.ENV_SESSION_REPORT_KEY: "x"}))
    sent: list = []
    sessions.poll({("7", 1)}, 1.0, lambda task, kw: sent.append(kw))
    assert sent == [] and "malformed key" in caplog.text


def test_an_attempt_that_ended_before_answering_is_forgotten() -> None:
    sessions = Sessions("127.0.0.1", probe=lambda host, port: True)
    sessions.prepare(launch(7))
    sent: list = []
    sessions.poll(set(), 1.0, lambda task, kw: sent.append(kw))
    assert sent == [] and sessions.pending == {}


def test_free_port_and_accepts() -> None:
    port = free_port("127.0.0.1")
    assert not accepts("127.0.0.1", port)


def test_a_real_session_job_is_reported_with_its_port_once_it_listens(tmp_path: Path, caplog) -> None:  # noqa: ANN001
    caplog.set_level(logging.DEBUG)
    h = Harness(tmp_path)
    h.sup.sessions.host = "127.0.0.1"
    assert h.launch(11, 1, SERVER, gpu_indices=(1, 2), env={contract.ENV_SESSION: "terminal"}) == "started"
    report = h.until(lambda: next(iter(h.of(contract.REPORT_SESSION, job_id=11)), None), "session report")
    assert accepts("127.0.0.1", report["port"])
    line = h.wait_line(11, lambda l: l.startswith("base"))
    assert line == "base /sessions/11/ gpus 1,2"
    assert report["secret"] not in caplog.text
    h.sup.kill({"job_id": 11, "attempt": 1, "reason": "cancel"})
    h.exited(11)
    assert len(h.of(contract.REPORT_SESSION)) == 1


def test_pending_sessions_survive_a_restart_through_the_state(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.sup.sessions.host = "127.0.0.1"
    h.sup.sessions.probe = lambda host, port: False  # the server has not answered before the "restart"
    assert h.launch(12, 1, SERVER, env={contract.ENV_SESSION: "jupyter"}) == "started"
    h.step()
    state = h.sup.to_state()
    assert [s["job_id"] for s in state["sessions"]] == [12]
    again = Harness(tmp_path / "again")
    again.sup.restore(state)
    assert list(again.sup.sessions.pending) == [("12", 1)]
    sent: list = []
    again.sup.sessions.probe = lambda host, port: True
    assert again.sup.sessions.poll({("12", 1)}, 1.0, lambda task, kw: sent.append(kw)) is True
    assert sent[0]["secret"] == state["sessions"][0]["secret"] and sent[0]["port"] == state["sessions"][0]["port"]
    h.sup.kill({"job_id": 12, "attempt": 1, "reason": "cancel"})
    h.exited(12)
