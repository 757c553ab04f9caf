"""Per-node Redis users: the rules as data, then what such a user can and cannot do on a real redis-server,
with the agent's real broker link."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import redis
from celery import Celery
from hypothesis import given
from hypothesis import strategies as st

from cluster import broker_acl, protocol
from cluster.agent import broker as agent_broker
from cluster.agent.broker import BrokerLink
from cluster.telemetry_stream import STREAM_KEY

SECRET = "broker-acl-test-secret"
node_names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", fullmatch=True)


# --- the rules -----------------------------------------------------------------------------------


def test_each_node_has_its_own_user_and_password_derived_from_the_secret() -> None:
    assert broker_acl.user_name("gpu-01") == "gpusched-node-gpu-01"
    one = broker_acl.password(SECRET, "gpu-01")
    assert one == broker_acl.password(SECRET, "gpu-01")
    assert len(one) == 64
    assert one != broker_acl.password(SECRET, "gpu-02")
    assert one != broker_acl.password(SECRET + "x", "gpu-01")


def test_no_password_without_the_agent_secret() -> None:
    with pytest.raises(broker_acl.BrokerAclError, match="GPUSCHED_AGENT_SECRET"):
        broker_acl.password("", "gpu-01")


@pytest.mark.parametrize("name", ["*", "gpu*", "a?", "[ab]", "a b", "a\\b", "", "-a", ".a", "a:b", "x" * 64,
                                  "node\n+@all", "a ~*", None, 7])
def test_a_name_that_could_widen_its_rules_is_refused_naming_the_field(name: object) -> None:
    with pytest.raises(broker_acl.BrokerAclError, match="^node: "):
        broker_acl.rules(name)  # type: ignore[arg-type]
    with pytest.raises(broker_acl.BrokerAclError, match="^node: "):
        broker_acl.setuser_args(SECRET, name)  # type: ignore[arg-type]


def _own_keys(node: str) -> set[str]:
    return {rule[1:] for rule in broker_acl.rules(node) if rule.startswith("~")}


@given(node_names, node_names)
def test_no_key_of_one_node_is_a_key_of_another(a: str, b: str) -> None:
    if a != b:
        assert not _own_keys(a) & _own_keys(b)
        assert protocol.node_queue(b) not in _own_keys(a)


@given(node_names)
def test_a_user_reaches_its_own_keys_only_appends_elsewhere_and_holds_no_glob(node: str) -> None:
    rules = broker_acl.rules(node)
    assert rules[:4] == ["reset", "on", "resetchannels", "-@all"]
    assert not {"allkeys", "allcommands", "+@all", "~*", "&*", "allchannels", "nopass"} & set(rules)
    assert not any(char in key for key in _own_keys(node) for char in "*?[]\\")
    assert protocol.node_queue(node) in _own_keys(node)
    selectors = [rule for rule in rules if rule.startswith("(")]
    assert selectors == [f"(%W~{protocol.REPORT_QUEUE} +lpush)", f"(%W~{STREAM_KEY} +xadd)"]


def test_the_acl_file_line_holds_the_password_hashed_never_clear() -> None:
    line = broker_acl.acl_file_line(SECRET, "gpu-01")
    assert line.startswith("user gpusched-node-gpu-01 reset on ")
    assert broker_acl.password(SECRET, "gpu-01") not in line
    assert line.split()[-1].startswith("#") and len(line.split()[-1]) == 65


@pytest.mark.parametrize(("base", "expected"), [
    ("redis://127.0.0.1:6379/0", "redis://gpusched-node-n1:{pw}@127.0.0.1:6379/0"),
    ("redis://:shared@redis.example:6380/2", "redis://gpusched-node-n1:{pw}@redis.example:6380/2"),
    ("rediss://admin:x@[::1]/3?ssl_cert_reqs=required", "rediss://gpusched-node-n1:{pw}@[::1]/3?ssl_cert_reqs=required"),
])
def test_a_node_url_replaces_any_credentials_and_keeps_the_rest(base: str, expected: str) -> None:
    assert broker_acl.node_url(base, SECRET, "n1") == expected.format(pw=broker_acl.password(SECRET, "n1"))


def test_a_node_url_needs_a_tcp_redis_url() -> None:
    with pytest.raises(broker_acl.BrokerAclError, match="^broker URL: "):
        broker_acl.node_url("unix:///run/redis.sock", SECRET, "n1")


def test_agent_users_reads_the_agents_connections_from_client_list() -> None:
    clients = [{"name": "gpusched-agent:n1", "user": "gpusched-node-n1"}, {"name": "gpusched-agent:n1", "user": "default"},
               {"name": "", "user": "default"}, {"name": "celery-worker", "user": "default"},
               {"name": broker_acl.client_name("n2"), "user": "gpusched-node-n2"}]
    assert broker_acl.agent_users(clients) == {"n1": {"gpusched-node-n1", "default"}, "n2": {"gpusched-node-n2"}}


# --- a real redis-server -------------------------------------------------------------------------


def _apply(admin: redis.Redis, *nodes: str) -> None:
    for node in nodes:
        admin.execute_command("ACL", "SETUSER", *broker_acl.setuser_args(SECRET, node))


def _server_app(url: str) -> Celery:
    return Celery("test-server", broker=url, set_as_current=False)


def _poll_until(link: BrokerLink, done, timeout: float = 15.0) -> float:  # noqa: ANN001
    start = time.monotonic()
    while not done() and time.monotonic() - start < timeout:
        link.poll(0.2)
    return time.monotonic() - start


@pytest.fixture
def acl_broker(private_redis):  # noqa: ANN001, ANN201
    admin = redis.Redis.from_url(private_redis.url)
    _apply(admin, "n1", "n2")
    yield private_redis, admin
    admin.close()


@pytest.mark.redis
def test_a_node_user_gets_its_commands_and_sends_reports_and_telemetry(acl_broker) -> None:  # noqa: ANN001
    server, admin = acl_broker
    server_app = _server_app(server.url)
    for node in ("n1", "n2"):
        server_app.send_task(protocol.AGENT_REGISTER_AGAIN, kwargs={"for": node}, queue=protocol.node_queue(node))
    got: list = []
    link = BrokerLink(broker_acl.node_url(server.url, SECRET, "n1"), "n1",
                      lambda headers, body, message: (got.append(body[1]), message.ack()), token="t")
    link.connect()
    try:
        _poll_until(link, lambda: got)
        assert got == [{"for": "n1"}]
        assert link.publish(protocol.REPORT_HEARTBEAT, {"node": "n1"}) is True
        link.publish_telemetry({"node": "n1", "gpus": []})
    finally:
        link.close()
    report = json.loads(admin.lindex(protocol.REPORT_QUEUE, 0))
    assert report["headers"]["task"] == protocol.REPORT_HEARTBEAT
    assert admin.xlen(STREAM_KEY) == 1
    assert admin.llen(protocol.node_queue("n2")) == 1  # n2's command is still there, for n2 alone
    assert admin.hlen("unacked") == 0 and admin.hlen(f"{protocol.node_queue('n1')}:unacked") == 0


HOSTILE = [
    ("LRANGE", "node.n2", 0, -1), ("BRPOP", "node.n2", 1), ("RPOPLPUSH", "node.n2", "node.n1"),
    ("LPUSH", "node.n2", "forged"), ("DEL", "node.n2"), ("HGETALL", "node.n2:unacked"),
    ("HGETALL", "unacked"), ("LRANGE", protocol.REPORT_QUEUE, 0, -1), ("BRPOP", protocol.REPORT_QUEUE, 1),
    ("DEL", protocol.REPORT_QUEUE), ("LTRIM", protocol.REPORT_QUEUE, 0, 0),
    ("XRANGE", STREAM_KEY, "-", "+"), ("XTRIM", STREAM_KEY, "MAXLEN", 0), ("DEL", STREAM_KEY),
    ("SADD", "_kombu.binding.celery", "celery\x06\x16\x06\x16node.n1"),
    ("SADD", "_kombu.binding.node.n2", "node.n2\x06\x16\x06\x16node.n1"),
    ("KEYS", "*"), ("SCAN", 0), ("MONITOR",), ("SUBSCRIBE", "anything"), ("PSUBSCRIBE", "*"),
    ("FLUSHDB",), ("FLUSHALL",), ("CONFIG", "GET", "*"), ("ACL", "LIST"), ("ACL", "SETUSER", "gpusched-node-n1", "+@all"),
    ("EVAL", "return 1", 0), ("SCRIPT", "FLUSH"), ("SHUTDOWN",), ("CLIENT", "LIST"),
]


@pytest.mark.redis
@pytest.mark.parametrize("command", HOSTILE, ids=lambda command: " ".join(map(str, command[:2])))
def test_a_node_user_cannot_read_write_or_administer_what_is_not_its_own(acl_broker, command) -> None:  # noqa: ANN001
    server, admin = acl_broker
    _server_app(server.url).send_task(protocol.AGENT_REGISTER_AGAIN, kwargs={}, queue=protocol.node_queue("n2"))
    admin.lpush(protocol.REPORT_QUEUE, "a report")
    admin.xadd(STREAM_KEY, {"node": "n2"})
    before = {key: admin.dump(key) for key in admin.keys("*")}
    n1 = redis.Redis.from_url(broker_acl.node_url(server.url, SECRET, "n1"), socket_timeout=5)
    with pytest.raises(redis.exceptions.NoPermissionError):
        n1.execute_command(*command)
    assert {key: admin.dump(key) for key in admin.keys("*")} == before
    assert admin.execute_command("ACL", "GETUSER", "gpusched-node-n1") is not None


@pytest.mark.redis
def test_a_script_runs_with_the_node_users_rights_only(acl_broker) -> None:  # noqa: ANN001
    server, admin = acl_broker
    admin.lpush("node.n2", "secret command")
    n1 = redis.Redis.from_url(broker_acl.node_url(server.url, SECRET, "n1"))
    sha = n1.script_load("return redis.call('lrange', 'node.n2', 0, -1)")
    with pytest.raises(redis.exceptions.ResponseError, match="can't run this command"):
        n1.evalsha(sha, 0)
    with pytest.raises(redis.exceptions.NoPermissionError):
        n1.evalsha(sha, 1, "node.n2")
    assert n1.evalsha(n1.script_load("return redis.call('llen', KEYS[1])"), 1, "node.n1") == 0


@pytest.mark.redis
def test_a_wrong_password_or_another_nodes_password_does_not_authenticate(acl_broker) -> None:  # noqa: ANN001
    server, _ = acl_broker
    stolen = broker_acl.node_url(server.url, SECRET, "n2").replace("gpusched-node-n2", "gpusched-node-n1")
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis.from_url(stolen).ping()


_CRASHING_AGENT = """
import os, sys
from cluster.agent.broker import BrokerLink
def die(headers, body, message):
    print("took", body[1], flush=True)
    os._exit(9)  # killed before the ack
link = BrokerLink(sys.argv[1], "n1", die)
link.connect()
while True:
    link.poll(1)
"""


@pytest.mark.redis
def test_a_command_held_by_an_agent_that_died_is_delivered_again_from_its_own_keys(
        acl_broker, monkeypatch) -> None:  # noqa: ANN001
    """The agent keeps its unacked commands under keys only it may touch, and puts them back itself once
    it runs again (no other consumer can see them any more)."""
    server, admin = acl_broker
    url = broker_acl.node_url(server.url, SECRET, "n1")
    _server_app(server.url).send_task(protocol.AGENT_REGISTER_AGAIN, kwargs={"n": 1}, queue=protocol.node_queue("n1"))
    crashed = subprocess.run([sys.executable, "-c", _CRASHING_AGENT, url], capture_output=True, text=True, timeout=60)
    assert "took {'n': 1}" in crashed.stdout, crashed.stderr
    assert admin.llen("node.n1") == 0 and admin.hlen("node.n1:unacked") == 1 and admin.hlen("unacked") == 0

    monkeypatch.setattr(agent_broker, "VISIBILITY_TIMEOUT", 1.0)
    got: list = []
    link = BrokerLink(url, "n1", lambda headers, body, message: (got.append(body[1]), message.ack()))
    link.connect()
    try:
        _poll_until(link, lambda: got)
    finally:
        link.close()
    assert got == [{"n": 1}]
    assert admin.hlen("node.n1:unacked") == 0 and admin.llen("node.n1") == 0


@pytest.mark.redis
def test_the_acl_file_lines_load_into_a_redis_and_its_users_work(private_redis, tmp_path) -> None:  # noqa: ANN001
    acl = tmp_path / "users.acl"
    acl.write_text("".join(broker_acl.acl_file_line(SECRET, node) + "\n" for node in ("n1", "n2")))
    server = private_redis.start_another(("--aclfile", str(acl)), where="with-aclfile")
    n1 = redis.Redis.from_url(broker_acl.node_url(server.url, SECRET, "n1"))
    assert n1.lpush("node.n1", "x") == 1
    with pytest.raises(redis.exceptions.NoPermissionError):
        n1.llen("node.n2")
