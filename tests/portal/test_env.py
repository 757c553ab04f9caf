"""Settings come from the environment and a bad value stops start-up naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from portal.env import env_bool, env_int, env_list, env_url

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("raw, expected", [("1", True), ("true", True), ("TRUE", True), ("0", False),
                                           ("false", False), ("", None)])
def test_env_bool_accepts_only_strict_values(raw, expected) -> None:
    assert env_bool("DEBUG", default=None, environ={"DEBUG": raw}) is expected


@pytest.mark.parametrize("raw", ["yes", "no", "on", "2", "tru"])
def test_env_bool_refuses_anything_else_naming_the_variable(raw) -> None:
    with pytest.raises(ImproperlyConfigured, match=rf"DEBUG='{raw}'"):
        env_bool("DEBUG", default=False, environ={"DEBUG": raw})


def test_other_readers_name_the_variable() -> None:
    with pytest.raises(ImproperlyConfigured, match="API_MAX_BODY_BYTES='big'"):
        env_int("API_MAX_BODY_BYTES", 1, environ={"API_MAX_BODY_BYTES": "big"})
    with pytest.raises(ImproperlyConfigured, match="ALLOWED_HOSTS"):
        env_list("ALLOWED_HOSTS", [], environ={"ALLOWED_HOSTS": "a,,b"})
    with pytest.raises(ImproperlyConfigured, match="REDIS_URL"):
        env_url("REDIS_URL", "redis://x", ("redis",), environ={"REDIS_URL": "http://x"})
    assert env_list("ALLOWED_HOSTS", [], environ={"ALLOWED_HOSTS": " a , b"}) == ["a", "b"]


def load_settings(**env: str) -> subprocess.CompletedProcess:
    """Import the real settings module in a fresh interpreter with exactly these variables."""
    keep = {k: v for k, v in os.environ.items() if k in {"PATH", "HOME", "LANG"}}
    code = ("import portal.settings as s; "
            "print(s.DEBUG, s.DATABASES['default']['ENGINE'], s.ALLOWED_HOSTS, s.SCHEDULER_POLICY, s.REDIS_URL)")
    return subprocess.run([sys.executable, "-c", code], env={**keep, **env}, cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("env, variable", [
    ({}, "SECRET_KEY"),
    ({"SECRET_KEY": "k", "DEBUG": "maybe"}, "DEBUG"),
    ({"SECRET_KEY": "k", "DATABASE_URL": "nosuchdb://x"}, "DATABASE_URL"),
    ({"SECRET_KEY": "k", "REDIS_URL": "localhost:6379"}, "REDIS_URL"),
    ({"SECRET_KEY": "k", "SCHEDULER_POLICY": "Fit GPP!"}, "SCHEDULER_POLICY"),
    ({"SECRET_KEY": "k", "SCHEDULER_AUTORUN": "sometimes"}, "SCHEDULER_AUTORUN"),
    ({"SECRET_KEY": "k", "CSRF_TRUSTED_ORIGINS": "example.org"}, "CSRF_TRUSTED_ORIGINS"),
    ({"SECRET_KEY": "k", "LOG_LEVEL": "LOUD"}, "LOG_LEVEL"),
    ({"SECRET_KEY": "k", "SCHEDULER_ROW_LOCK_WAIT": "-1"}, "SCHEDULER_ROW_LOCK_WAIT"),
    ({"SECRET_KEY": "k", "SCHEDULER_ROW_LOCK_WAIT": "a second"}, "SCHEDULER_ROW_LOCK_WAIT"),
])
def test_bad_environment_fails_start_up_naming_the_variable(env, variable) -> None:
    result = load_settings(**env)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("django.core.exceptions.ImproperlyConfigured") and variable in last


def test_debug_run_needs_no_secret_and_defaults_are_local(tmp_path) -> None:
    result = load_settings(DEBUG="1", DATABASE_URL=f"sqlite:///{tmp_path}/db.sqlite3")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[:2] == ["True", "django.db.backends.sqlite3"]
    assert "'fitgpp'" not in result.stdout and "fitgpp" in result.stdout
    assert "redis://127.0.0.1:6379/0" in result.stdout


def test_production_values_are_read(tmp_path) -> None:
    result = load_settings(SECRET_KEY="s" * 50, DEBUG="false", ALLOWED_HOSTS="gpu.example.org,10.0.0.5",
                           DATABASE_URL="postgres://u:p@db:5432/portal", REDIS_URL="redis://cache:6379/2",
                           SCHEDULER_POLICY="fifo")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "django.db.backends.postgresql", "['gpu.example.org',",
                                     "'10.0.0.5']", "fifo", "redis://cache:6379/2"]


def test_the_keys_being_rotated_out_and_the_upgrade_switch_for_unsealed_tasks_are_read(tmp_path) -> None:
    code = "import portal.settings as s; print(s.SECRET_KEY_FALLBACKS, s.GPUSCHED_RUN_UNSEALED_TASKS)"
    keep = {k: v for k, v in os.environ.items() if k in {"PATH", "HOME", "LANG"}}
    base = {**keep, "SECRET_KEY": "new" * 20, "DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite3"}
    run = [sys.executable, "-c", code]
    read = subprocess.run(run, env={**base, "SECRET_KEY_FALLBACKS": "old1,old2", "GPUSCHED_RUN_UNSEALED_TASKS": "true"},
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert read.stdout.split() == ["['old1',", "'old2']", "True"], read.stderr
    default = subprocess.run(run, env=base, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert default.stdout.split() == ["[]", "False"], default.stderr
    bad = subprocess.run(run, env={**base, "GPUSCHED_RUN_UNSEALED_TASKS": "perhaps"}, cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode != 0 and "GPUSCHED_RUN_UNSEALED_TASKS" in bad.stderr.strip().splitlines()[-1]


def test_celery_app_reads_django_settings() -> None:
    from django.conf import settings

    from portal import celery_app

    assert celery_app.main == "portal"
    assert celery_app.conf.broker_url == settings.CELERY_BROKER_URL
    assert celery_app.conf.task_default_queue == "celery"


def test_asgi_app_routes_http_to_django_and_websockets_to_channels() -> None:
    from channels.routing import ProtocolTypeRouter

    from portal.asgi import application

    assert isinstance(application, ProtocolTypeRouter)
    assert set(application.application_mapping) == {"http", "websocket"}


def test_channel_layer_uses_redis() -> None:
    from django.conf import settings

    layer = settings.CHANNEL_LAYERS["default"]
    assert layer["BACKEND"] == "channels_redis.core.RedisChannelLayer"
    assert [host["address"] for host in layer["CONFIG"]["hosts"]] == [settings.REDIS_URL]


@pytest.mark.redis
def test_the_channel_layer_keeps_waiting_through_a_quiet_spell_longer_than_its_blocking_read(redis_url) -> None:
    """A receive blocks in BRPOP for 5 s at a time; a socket timeout no longer than that (redis-py 8's
    default) raised in the middle of the wait, which closed every live websocket after 5 quiet seconds."""
    import asyncio
    import uuid

    from channels_redis.core import RedisChannelLayer
    from django.conf import settings

    host = {**settings.CHANNEL_LAYER_HOST, "address": redis_url}  # the deployed options, the test's Redis
    layer = RedisChannelLayer(hosts=[host], prefix=f"test-quiet-{uuid.uuid4().hex}")

    async def message_after_a_quiet_spell() -> dict:
        channel = await layer.new_channel()

        async def send_late() -> None:
            await asyncio.sleep(6.5)
            await layer.send(channel, {"type": "late"})

        sender = asyncio.ensure_future(send_late())
        try:
            return await asyncio.wait_for(layer.receive(channel), 30)
        finally:
            await sender
            await layer.flush()
            await layer.close_pools()

    assert asyncio.run(message_after_a_quiet_spell()) == {"type": "late"}
