"""Routine tasks leave no line per run in a worker's or beat's log; other tasks and failures do.

The filter is checked on the records Celery itself makes (its own logging calls), and once in a
real worker process started as ``scripts/serve.sh worker`` starts it."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from celery.app import trace
from celery.signals import after_setup_logger

from cluster import task_log

ROOT = Path(__file__).resolve().parents[2]


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def kept() -> Iterator[_Kept]:
    """A handler on each Celery logger the filter sits on, with the filter installed."""
    handler = _Kept()
    loggers = [logging.getLogger(name) for name in task_log.LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)
    task_log.install(keep_routine=False)
    yield handler
    task_log.install(keep_routine=True)
    for lg, level in zip(loggers, levels):
        lg.removeHandler(handler)
        lg.setLevel(level)


def _success(name: str) -> None:
    trace.info(trace.LOG_SUCCESS, {"id": "1", "name": name, "return_value": "None", "runtime": 0.01,
                                   "args": "()", "kwargs": "{}"})


def _received(name: str) -> None:
    context = {"id": "2", "name": name, "args": "()", "kwargs": "{}", "eta": None}
    logging.getLogger("celery.worker.strategy").info(trace.LOG_RECEIVED, context, extra={"data": context})


def test_routine_tasks_lose_their_per_task_lines_and_others_keep_them(kept: _Kept) -> None:
    for name in ("cluster.heartbeat", "gputelemetry.drain"):
        _success(name)
        _received(name)
    _success("cluster.exited")
    _received("cluster.started")
    assert [line.split("[")[0] for line in kept.lines] == ["Task cluster.exited", "Task cluster.started"]


def test_beat_sends_routine_tasks_quietly(kept: _Kept) -> None:
    beat = logging.getLogger("celery.beat")
    beat.info("Scheduler: Sending due task %s (%s)", "scheduler-tick", "scheduler.tick")
    beat.info("Scheduler: Sending due task %s (%s)", "nightly-report", "reports.nightly")
    beat.info("beat: Starting...")
    assert kept.lines == ["Scheduler: Sending due task nightly-report (reports.nightly)", "beat: Starting..."]


def test_a_routine_task_that_fails_is_still_logged(kept: _Kept) -> None:
    logging.getLogger("celery.app.trace").error(trace.LOG_FAILURE, {
        "id": "3", "name": "cluster.heartbeat", "exc": "ValueError('x')", "traceback": "", "args": "()",
        "kwargs": "{}", "description": "raised unexpected"})
    logging.getLogger("celery.app.trace").info(trace.LOG_RETRY, {
        "id": "4", "name": "cluster.heartbeat", "exc": "busy"})
    assert len(kept.lines) == 2 and all("cluster.heartbeat" in line for line in kept.lines)


def test_log_routine_tasks_keeps_every_line(kept: _Kept) -> None:
    task_log.install(keep_routine=True)
    _success("cluster.heartbeat")
    assert len(kept.lines) == 1


def test_setting_up_a_workers_logging_installs_it(settings) -> None:  # noqa: ANN001
    import cluster.broker  # noqa: F401  (connects the signal)

    strategy = logging.getLogger("celery.worker.strategy")
    try:
        settings.LOG_ROUTINE_TASKS = False
        after_setup_logger.send(sender=None, logger=logging.getLogger(), loglevel=logging.INFO, logfile=None,
                                format="", colorize=False)
        assert any(isinstance(f, task_log.RoutineTaskFilter) for f in strategy.filters)
        settings.LOG_ROUTINE_TASKS = True
        after_setup_logger.send(sender=None, logger=logging.getLogger(), loglevel=logging.INFO, logfile=None,
                                format="", colorize=False)
        assert not any(isinstance(f, task_log.RoutineTaskFilter) for f in strategy.filters)
    finally:
        task_log.install(keep_routine=True)


@pytest.mark.skipif("postgres" not in os.environ.get("DATABASE_URL", ""), reason="the worker test runs with the suite's PostgreSQL and Redis")
def test_a_real_worker_logs_no_routine_task(tmp_path: Path) -> None:
    """Tasks sent already expired: the worker logs their arrival and never runs them, so nothing
    else of the test run is touched. Its queue is its own."""
    from cluster.broker import app

    queue = f"task-log-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "worker.log"
    env = {**os.environ, "SECRET_KEY": "task-log-test"}
    env.pop("LOG_ROUTINE_TASKS", None)
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "portal", "worker", "--loglevel", "info", "--queues", queue,
             "--concurrency", "1", "--hostname", f"{queue}@%h", "--without-gossip", "--without-mingle"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while " ready." not in log.read_text(errors="replace"):
            assert worker.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-2000:]
            time.sleep(0.2)
        past = datetime.now(timezone.utc) - timedelta(minutes=5)
        routine = app.send_task("cluster.heartbeat", args=("node-x", {}), queue=queue, expires=past)
        other = app.send_task("cluster.started", args=("node-x", {}), queue=queue, expires=past)
        while f"[{other.id}] received" not in log.read_text(errors="replace"):
            assert worker.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-2000:]
            time.sleep(0.2)
        time.sleep(0.5)  # the routine task was sent first: its line, if any, is written by now
        text = log.read_text(errors="replace")
        assert f"Task cluster.started[{other.id}] received" in text
        assert f"Discarding revoked task: cluster.heartbeat[{routine.id}]" in text  # it did arrive
        assert f"cluster.heartbeat[{routine.id}] received" not in text
    finally:
        worker.terminate()
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        app.connection_for_write().default_channel.client.delete(queue)
