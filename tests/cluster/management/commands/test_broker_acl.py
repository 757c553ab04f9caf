"""manage.py broker_acl on a real redis-server: apply, print, save and revoke per-node users; bad input names
the field and changes nothing on the broker."""

from __future__ import annotations

from io import StringIO

import pytest
import redis
from django.core.management import CommandError, call_command

from cluster import broker_acl
from tests.support.live_helpers import make_node

pytestmark = [pytest.mark.django_db, pytest.mark.redis]
SECRET = "broker-acl-command-secret"


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("broker_acl", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def users(url: str) -> set[str]:
    return {name.decode() for name in redis.Redis.from_url(url).execute_command("ACL", "USERS")}


@pytest.fixture
def broker(private_redis, settings):  # noqa: ANN001, ANN201
    settings.CELERY_BROKER_URL = private_redis.url
    settings.AGENT_SECRET = SECRET
    return private_redis


def test_apply_creates_users_that_authenticate_with_the_printed_urls(broker) -> None:  # noqa: ANN001
    out, err = run("--apply", "n1", "n2")
    assert out.splitlines() == ["applied gpusched-node-n1", "applied gpusched-node-n2"]
    assert "Redis forgets these users when it restarts" in err  # no aclfile: said, not hidden
    assert users(broker.url) == {"default", "gpusched-node-n1", "gpusched-node-n2"}
    urls, _ = run("--url", "n1", "n2")
    for node, url in zip(("n1", "n2"), urls.splitlines(), strict=True):
        client = redis.Redis.from_url(url)
        assert client.ping()
        assert client.lpush(f"node.{node}", "x") == 1
    assert run("--url", "--broker-url", "redis://10.0.0.5:6379/1", "n1")[0].strip() == \
        f"redis://gpusched-node-n1:{broker_acl.password(SECRET, 'n1')}@10.0.0.5:6379/1"


def test_apply_all_takes_the_nodes_the_database_knows(broker) -> None:  # noqa: ANN001
    make_node("db-node-1", 1)
    make_node("db-node-2", 1)
    run("--apply", "--all", "n1")
    assert users(broker.url) == {"default", "gpusched-node-n1", "gpusched-node-db-node-1", "gpusched-node-db-node-2"}


def test_apply_saves_to_the_brokers_aclfile_so_a_restart_keeps_the_users(private_redis, settings, tmp_path) -> None:  # noqa: ANN001
    acl = tmp_path / "users.acl"
    acl.touch()
    server = private_redis.start_another(("--aclfile", str(acl)), where="with-aclfile")
    settings.CELERY_BROKER_URL, settings.AGENT_SECRET = server.url, SECRET
    out, err = run("--apply", "n1")
    assert "saved to the broker's aclfile" in out and err == ""
    assert "user gpusched-node-n1 " in acl.read_text()
    assert broker_acl.password(SECRET, "n1") not in acl.read_text()
    server.restart()
    assert redis.Redis.from_url(broker_acl.node_url(server.url, SECRET, "n1")).llen("node.n1") == 0


def test_acl_file_prints_lines_without_the_password(broker) -> None:  # noqa: ANN001
    out, _ = run("--acl-file", "n1")
    assert out == broker_acl.acl_file_line(SECRET, "n1") + "\n"
    assert broker_acl.password(SECRET, "n1") not in out


def test_revoke_deletes_the_user_and_the_commands_still_queued_for_its_node(broker) -> None:  # noqa: ANN001
    run("--apply", "n1", "n2")
    admin = redis.Redis.from_url(broker.url)
    admin.lpush("node.n1", "a launch with its job's environment")
    admin.hset("node.n1:unacked", "tag", "another")
    admin.lpush("node.n2", "n2's")
    assert run("--revoke", "n1")[0].splitlines()[0] == "revoked gpusched-node-n1; removed 2 key(s) of its queue"
    assert users(broker.url) == {"default", "gpusched-node-n2"}
    assert admin.exists("node.n1", "node.n1:unacked") == 0 and admin.llen("node.n2") == 1
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis.from_url(broker_acl.node_url(broker.url, SECRET, "n1")).ping()


@pytest.mark.parametrize(("args", "message"), [
    (("--apply", "n1", "bad*name"), "node: 'bad*name' is not a node name"),
    (("--apply", "n1", "a b"), "node: 'a b' is not a node name"),
    (("--apply",), "nodes: name at least one NODE"),
    (("--url", "--broker-url", "unix:///run/redis.sock", "n1"), "broker URL: "),
])
def test_bad_input_names_the_field_and_applies_nothing(broker, args, message) -> None:  # noqa: ANN001
    with pytest.raises(CommandError, match=message.replace("*", r"\*")):
        run(*args)
    assert users(broker.url) == {"default"}


def test_without_the_agent_secret_nothing_is_applied(broker, settings) -> None:  # noqa: ANN001
    settings.AGENT_SECRET = ""
    with pytest.raises(CommandError, match="GPUSCHED_AGENT_SECRET is not set"):
        run("--apply", "n1", "n2")
    assert users(broker.url) == {"default"}


def test_an_unreachable_broker_is_named(settings) -> None:  # noqa: ANN001
    from tests.adversarial.stack import free_port

    settings.CELERY_BROKER_URL, settings.AGENT_SECRET = f"redis://127.0.0.1:{free_port()}/0", SECRET
    with pytest.raises(CommandError, match="cannot reach the broker"):
        run("--apply", "n1")


def test_exactly_one_action_is_required(broker) -> None:  # noqa: ANN001
    with pytest.raises(CommandError, match="one of the arguments --apply --url --acl-file --check --revoke is required"):
        run("n1")


def test_during_a_rotation_a_user_takes_its_old_and_new_password_and_afterwards_the_new_only(broker, settings) -> None:  # noqa: ANN001
    run("--apply", "n1")  # under the old secret
    settings.AGENT_SECRET, settings.AGENT_SECRET_FALLBACKS = "rotated-secret", [SECRET]
    run("--apply", "n1")
    old = broker_acl.node_url(broker.url, SECRET, "n1")
    new = run("--url", "n1")[0].strip()
    assert new == broker_acl.node_url(broker.url, "rotated-secret", "n1")
    assert redis.Redis.from_url(old).ping() and redis.Redis.from_url(new).ping()
    assert run("--acl-file", "n1")[0].count(" #") == 2

    settings.AGENT_SECRET_FALLBACKS = []  # the rotation is over
    run("--apply", "n1")
    assert redis.Redis.from_url(new).ping()
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis.from_url(old).ping()


def test_check_says_which_connected_agents_are_on_their_own_user(broker) -> None:  # noqa: ANN001
    from cluster.agent.broker import BrokerLink

    run("--apply", "n1", "n2", "n3")
    links = [BrokerLink(broker_acl.node_url(broker.url, SECRET, "n1"), "n1", lambda *a: None),
             BrokerLink(broker.url, "n2", lambda *a: None)]  # n2's agent still on the shared password
    for link in links:
        link.connect()
    try:
        out, _ = run("--check", "n1", "n2", "n3")
    finally:
        for link in links:
            link.close()
    assert out.splitlines() == ["n1: on its own user", "n2: on a shared user (default): give it its own",
                                "n3: not connected"]
