"""Redis with a password: the settings take it from the URL or from REDIS_PASSWORD_FILE, and against a real
private redis-server started with ``requirepass`` the portal, a worker's broker connection and an agent work
with it while a client without it gets NOAUTH (portal.env, portal.settings, cluster.agent.broker)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from portal.env import read_secret_file, redis_url_with_password
from tests.adversarial.stack import free_port, stop_group, wait_for

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "pa ss/w@rd:42"  # characters a URL must escape


@pytest.mark.parametrize("url, expected", [
    ("redis://127.0.0.1:6390/0", "redis://:pa%20ss%2Fw%40rd%3A42@127.0.0.1:6390/0"),
    ("redis://redis/1", "redis://:pa%20ss%2Fw%40rd%3A42@redis/1"),
    ("rediss://user@h:1/0", "rediss://user:pa%20ss%2Fw%40rd%3A42@h:1/0"),
    ("redis://:own@h:1/0", "redis://:own@h:1/0"),  # a password in the URL wins
    ("redis://[::1]:6379/0", "redis://:pa%20ss%2Fw%40rd%3A42@[::1]:6379/0"),
])
def test_the_password_goes_into_a_url_without_one(url: str, expected: str) -> None:
    assert redis_url_with_password(url, PASSWORD) == expected
    assert redis_url_with_password(url, "") == url


def test_a_password_file_that_is_missing_or_empty_is_an_error_naming_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ImproperlyConfigured, match="REDIS_PASSWORD_FILE=.*cannot be read"):
        read_secret_file("REDIS_PASSWORD_FILE", str(tmp_path / "absent"))
    (tmp_path / "empty").write_text("")
    with pytest.raises(ImproperlyConfigured, match="REDIS_PASSWORD_FILE=.* is empty"):
        read_secret_file("REDIS_PASSWORD_FILE", str(tmp_path / "empty"))
    (tmp_path / "pw").write_text(PASSWORD + "\n")
    assert read_secret_file("REDIS_PASSWORD_FILE", str(tmp_path / "pw")) == PASSWORD


@pytest.fixture
def private_redis(tmp_path: Path):  # noqa: ANN201
    """A redis-server of this test only, asking for PASSWORD (given in a 0600 config file)."""
    import redis

    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed")
    conf = tmp_path / "auth.conf"
    conf.write_text(f'requirepass "{PASSWORD}"\n')
    conf.chmod(0o600)
    port = free_port()
    process = subprocess.Popen([binary, str(conf), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                "--appendonly", "no", "--dir", str(tmp_path)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"redis://127.0.0.1:{port}/0"
    authed = redis.Redis.from_url(redis_url_with_password(url, PASSWORD), socket_connect_timeout=1)

    def up() -> bool:
        try:
            return bool(authed.ping())
        except redis.RedisError:
            return False

    wait_for(up, "the private redis-server")
    try:
        yield url, authed
    finally:
        stop_group(process)


def test_a_client_without_the_password_gets_noauth(private_redis) -> None:  # noqa: ANN001
    import redis

    url, authed = private_redis
    with pytest.raises(redis.AuthenticationError, match="(?i)auth"):
        redis.Redis.from_url(url, socket_connect_timeout=1).keys("*")
    with pytest.raises(redis.AuthenticationError):
        redis.Redis.from_url(redis_url_with_password(url, "wrong"), socket_connect_timeout=1).ping()
    assert authed.ping()


def test_agent_portal_and_worker_talk_through_the_password_protected_broker(private_redis, tmp_path) -> None:  # noqa: ANN001
    from cluster import protocol
    from cluster.agent.broker import BrokerDown, BrokerLink

    url, authed = private_redis
    # The agent: with the password (as serve.sh gives it), it publishes a report; without, it cannot connect.
    agent = BrokerLink(redis_url_with_password(url, PASSWORD), "n1", lambda *a: None)
    agent.connect()
    assert agent.publish(protocol.REPORT_HEARTBEAT, {"node": "n1", "running": [], "token": ""})
    agent.close()
    with pytest.raises(BrokerDown):
        BrokerLink(url, "n1", lambda *a: None).connect()
    assert authed.llen(protocol.REPORT_QUEUE) == 1
    # The portal and a worker, configured the deployed way: REDIS_URL without a password plus the password file.
    secret = tmp_path / "redis.password"
    secret.write_text(PASSWORD + "\n")
    script = """
import json, django
django.setup()
from django.conf import settings
from kombu import Connection
from cluster import commands, protocol
sent = commands.send("n1", protocol.AGENT_RECONCILE, {"keep": []})  # the portal publishing a command
with Connection(settings.CELERY_BROKER_URL) as conn:  # a worker's broker connection takes the agent's report
    queue = conn.SimpleQueue(protocol.REPORT_QUEUE)
    message = queue.get(timeout=5)
    message.ack()
    queue.close()
print(json.dumps({"sent": sent, "task": message.headers["task"]}))
"""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings", "SECRET_KEY": "test-only", "REDIS_URL": url,
           "REDIS_PASSWORD_FILE": str(secret), "PYTHONPATH": str(REPO)}
    env.pop("CELERY_BROKER_URL", None)
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"sent": True, "task": protocol.REPORT_HEARTBEAT}
    assert authed.llen(protocol.node_queue("n1")) == 1 and authed.llen(protocol.REPORT_QUEUE) == 0
