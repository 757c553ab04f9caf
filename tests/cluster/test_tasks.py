"""The REPORT_* Celery tasks: names from the protocol, token check, field-named rejections."""

from __future__ import annotations

import logging
import time

import pytest

from cluster import protocol, tasks
from cluster.models import Gpu, Node
from scheduler.models import AttemptLog

pytestmark = pytest.mark.django_db

REGISTER = {"node": "n1", "gpus": 2, "cpus": 8.0, "mem_gb": 16, "gpu_models": ["Virtual GPU"], "token": "",
            "agent_version": "0.1"}


def test_every_report_has_a_task_under_its_protocol_name() -> None:
    from portal.celery import app

    names = {protocol.REPORT_REGISTER, protocol.REPORT_HEARTBEAT, protocol.REPORT_STARTED, protocol.REPORT_EXITED,
             protocol.REPORT_LOG}
    assert names <= set(app.tasks)


def test_register_accepts_unknown_extra_fields(sent, no_triggers) -> None:
    tasks.register(**REGISTER, future_field={"x": 1})
    assert Node.objects.get(name="n1").gpus == 2 and Gpu.objects.count() == 2


BAD_REPORTS = [
    (tasks.register, {**REGISTER, "gpus": -1}, "gpus"),
    (tasks.register, {**REGISTER, "gpus": True}, "gpus"),
    (tasks.register, {**REGISTER, "cpus": "8"}, "cpus"),
    (tasks.register, {**REGISTER, "node": "bad name!"}, "node"),
    (tasks.register, {**REGISTER, "gpu_models": "A100"}, "gpu_models"),
    (tasks.heartbeat, {"node": "n1", "running": [[1]], "sent_at": 0}, "keep[0]"),
    (tasks.started, {"node": "n1", "job_id": "abc", "attempt": 1, "pid": 1, "started_at": 0}, "job_id"),
    (tasks.started, {"node": "n1", "job_id": 1, "attempt": -1, "pid": 1, "started_at": 0}, "attempt"),
    (tasks.started, {"node": "n1", "job_id": 1, "attempt": 1, "pid": 1, "started_at": "now"}, "started_at"),
    (tasks.exited, {"node": "n1", "job_id": 1, "attempt": 1, "exit_code": "0", "ended_at": 0}, "exit_code"),
    (tasks.exited, {"node": "n1", "job_id": 1, "attempt": 1, "ended_at": 0, "checkpointed": "yes"}, "checkpointed"),
    (tasks.exited, {"node": "n1", "job_id": 1, "attempt": 1, "ended_at": 0, "checkpoint_marker": 1}, "checkpoint_marker"),
    (tasks.log_lines, {"node": "n1", "job_id": 1, "attempt": 1, "lines": ["ok", 3]}, "lines[1]"),
]


@pytest.mark.parametrize(("task", "kwargs", "field"), BAD_REPORTS)
def test_a_malformed_report_is_dropped_naming_the_field(task, kwargs, field, caplog, sent) -> None:
    with caplog.at_level(logging.ERROR, logger="cluster.tasks"):
        assert task(**kwargs) is None
    assert f"{field}:" in caplog.text
    assert not Node.objects.exists() and not AttemptLog.objects.exists() and sent.items == []


def test_reports_need_the_configured_token(settings, sent, no_triggers, caplog) -> None:
    settings.AGENT_TOKEN = "s3cret"
    with caplog.at_level(logging.ERROR, logger="cluster.tasks"):
        tasks.register(**{**REGISTER, "token": "wrong"})
    assert not Node.objects.exists() and "wrong or missing agent token" in caplog.text
    tasks.register(**{**REGISTER, "token": "s3cret"})
    assert Node.objects.filter(name="n1").exists()


def test_digit_string_job_ids_are_accepted(sent, no_triggers, django_capture_on_commit_callbacks) -> None:
    tasks.register(**REGISTER)
    with django_capture_on_commit_callbacks(execute=True):
        tasks.heartbeat(node="n1", running=[["17", 2]], sent_at=time.time(), token="")
    ((node, kw),) = sent.of(protocol.AGENT_KILL)
    assert (node, kw["job_id"], kw["attempt"]) == ("n1", 17, 2)


def _repeated_exit(job_id: object = 5, **fields: object) -> dict[str, object]:
    return {"job_id": job_id, "attempt": 1, "exit_code": 0, "signal": None, "ended_at": 100.0, "notice_at": None,
            "checkpointed": False, "reason": None, "message": "", "peak_mem_bytes": None, "cpu_seconds": None, **fields}


def test_a_heartbeat_hands_its_repeated_exits_to_liveness_by_attempt(sent, no_triggers, monkeypatch) -> None:
    seen = {}
    monkeypatch.setattr(tasks.liveness, "heartbeat", lambda node, running, now, exited: seen.update(exited()))
    tasks.heartbeat(node="n1", running=[], sent_at=time.time(), token="",
                    exited=[_repeated_exit(5, exit_code=3, message="bye\x00"), _repeated_exit("6", signal=9)])
    assert sorted(seen) == [(5, 1), (6, 1)]
    assert (seen[(5, 1)]["exit_code"], seen[(5, 1)]["message"], seen[(6, 1)]["signal"]) == (3, "bye", 9)
    assert seen[(5, 1)]["ended_at"].timestamp() == 100.0


@pytest.mark.parametrize(("entry", "named"), [
    (_repeated_exit(exit_code="0"), "exited[1].exit_code:"),
    (_repeated_exit(job_id="abc"), "exited[1].job_id:"),
    (_repeated_exit(ended_at=None), "exited[1].ended_at:"),
    (_repeated_exit(checkpointed="yes"), "exited[1].checkpointed:"),
    ("not an object", "exited[1] must be an object"),
])
def test_a_malformed_repeated_exit_is_left_out_naming_it_and_the_heartbeat_still_counts(
        entry, named, sent, no_triggers, caplog, monkeypatch) -> None:
    seen = {}
    monkeypatch.setattr(tasks.liveness, "heartbeat", lambda node, running, now, exited: seen.update(exited()))
    with caplog.at_level(logging.WARNING, logger="cluster.tasks"):
        tasks.heartbeat(node="n1", running=[], sent_at=time.time(), token="", exited=[_repeated_exit(7), entry])
    assert named in caplog.text
    assert list(seen) == [(7, 1)]


def test_a_heartbeat_whose_exited_is_not_a_list_still_counts(sent, no_triggers, caplog, monkeypatch) -> None:
    tasks.register(**REGISTER)
    before = Node.objects.get(name="n1").last_heartbeat
    tasks.heartbeat(node="n1", running=[], sent_at=time.time(), token="", exited={"job_id": 1})
    assert Node.objects.get(name="n1").last_heartbeat > before

    read = []
    monkeypatch.setattr(tasks.liveness, "heartbeat", lambda node, running, now, exited: read.append(exited()))
    with caplog.at_level(logging.WARNING, logger="cluster.tasks"):
        tasks.heartbeat(node="n1", running=[], sent_at=time.time(), token="", exited={"job_id": 1})
    assert "exited must be a list" in caplog.text and read == [{}]


def _next_job_id_after(caught_up: object) -> int:
    from tests.support.live_helpers import make_user, submit

    return submit(make_user(f"after{id(caught_up)}"), name="after").pk


@pytest.mark.parametrize("where", ["running", "exited"])
def test_a_heartbeat_naming_a_job_id_not_yet_issued_moves_the_sequence_past_it(where, sent, no_triggers,
                                                                                monkeypatch) -> None:
    """As after a restore without advance_job_ids: ids handed out afterwards are new to every agent."""
    from scheduler import job_ids
    from scheduler.models import Job
    from tests.support.live_helpers import make_user, submit

    job_ids.forget_read_value()
    issued = submit(make_user("before"), name="before").pk
    ahead = issued + 40
    tasks.register(**REGISTER)
    report = {"running": [[ahead, 1]]} if where == "running" else {"exited": ["junk", _repeated_exit(str(ahead))]}
    tasks.heartbeat(node="n1", sent_at=time.time(), token="", **{"running": [], **report})
    assert _next_job_id_after(where) > ahead + job_ids.DEFAULT_GAP - 1
    assert Job.objects.count() == 2
    job_ids.forget_read_value()


def test_a_heartbeat_naming_issued_ids_moves_nothing(sent, no_triggers) -> None:
    from scheduler import job_ids
    from tests.support.live_helpers import make_user, submit

    job_ids.forget_read_value()
    issued = submit(make_user("steady"), name="steady").pk
    tasks.register(**REGISTER)
    tasks.heartbeat(node="n1", running=[[issued, 1]], sent_at=time.time(), token="",
                    exited=[_repeated_exit(issued - 1 if issued > 1 else issued)])
    assert _next_job_id_after("steady") == issued + 1
    job_ids.forget_read_value()
