"""scripts/up.sh, run for real, leaves none of the stack's runtime keys in Redis after Ctrl-C."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import redis

from tests.support.procs import interruptible

ROOT = Path(__file__).resolve().parents[2]
STARTED = "Press Ctrl-C to stop everything"

pytestmark = [pytest.mark.e2e, pytest.mark.redis]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_stopping_the_stack_removes_its_runtime_keys(redis_url, tmp_path) -> None:
    client = redis.Redis.from_url(redis_url)
    client.delete("gpusched:scheduler:cycle-requested", "asgi:group:left-over")
    client.set("asgi:group:left-over", "1")
    env = {k: v for k, v in os.environ.items() if k not in ("CELERY_BROKER_URL", "CHANNEL_LAYER_URL")}
    env.update({"REDIS_URL": redis_url, "DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite3", "PORT": str(_free_port()),
                "GPUSCHED_LOCAL_AGENTS": "0", "SECRET_KEY": "up-stop-test-secret-key"})
    out = tmp_path / "up.log"
    with open(out, "wb") as log:
        up = subprocess.Popen(["scripts/up.sh"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True, preexec_fn=interruptible)
    try:
        deadline = time.monotonic() + 240
        while STARTED not in out.read_text(errors="replace"):
            assert up.poll() is None, out.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "up.sh did not start:\n" + out.read_text(errors="replace")[-3000:]
            time.sleep(0.5)
        # While it runs, beat's tick leaves the loop's last-tick mark.
        deadline = time.monotonic() + 60
        while not client.exists("gpusched:scheduler:last-tick") and time.monotonic() < deadline:
            time.sleep(0.5)
        assert client.exists("gpusched:scheduler:last-tick"), "no scheduling tick ran while the stack was up"
        os.killpg(up.pid, signal.SIGINT)
        up.wait(timeout=120)
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
    text = out.read_text(errors="replace")
    assert "runtime key(s) removed from Redis" in text, text[-3000:]
    left = sorted(k.decode() for p in ("gpusched:scheduler:*", "gpusched:metrics:*", "asgi:*") for k in client.scan_iter(match=p))
    assert left == [], left
