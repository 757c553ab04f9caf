"""The namespace network of the multi-host harness: hosts reach each other and the machine over the
bridge and nothing else; a cut host is unreachable until healed; destroy() leaves nothing behind."""

from __future__ import annotations

import ipaddress
import subprocess
import sys
import time

import pytest

from tests.conftest import unavailable
from tests.support import netns

PROBE = "import socket, sys\ntry:\n    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1).close()\n" \
        "    print('connected')\nexcept OSError as exc:\n    print(type(exc).__name__, exc.errno)\n"


@pytest.fixture
def network():  # noqa: ANN201
    try:
        net = netns.Network.create(["a", "b"])
    except netns.NetnsUnavailable as exc:
        unavailable(str(exc))
    try:
        yield net
    finally:
        net.destroy()


def listen(net: netns.Network, host: str) -> subprocess.Popen:
    """A TCP listener on port 7000 of ``host`` that accepts forever."""
    code = ("import socket\ns = socket.socket()\ns.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            f"s.bind(('{net.address(host)}', 7000))\ns.listen()\nprint('ready', flush=True)\n"
            "while True:\n    s.accept()[0].close()\n")
    process = subprocess.Popen(net.argv(host, [sys.executable, "-c", code]), stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "ready"
    return process


def probe(net: netns.Network, host: str, address: str, port: int = 7000) -> str:
    result = subprocess.run(net.argv(host, [sys.executable, "-c", PROBE, address, str(port)]), capture_output=True,
                            text=True, timeout=30)
    return result.stdout.strip()


def test_hosts_reach_each_other_and_the_machine_but_nothing_beyond_the_bridge(network) -> None:
    listener = listen(network, "b")
    try:
        assert probe(network, "a", network.address("b")) == "connected"
        # the machine itself, through the bridge's address (a refused port: reachable, nothing listens)
        assert probe(network, "a", network.gateway, 1).startswith("ConnectionRefusedError")
        # no default route: any other address is unreachable from inside
        assert probe(network, "a", "192.0.2.1", 80).startswith("OSError 101")
    finally:
        listener.kill()
        listener.wait()
    assert all(ipaddress.ip_address(network.address(h)) in network.subnet for h in ("a", "b"))
    assert network.subnet.subnet_of(ipaddress.ip_network("10.213.0.0/16"))


def test_a_cut_host_is_unreachable_until_healed(network) -> None:
    listener = listen(network, "b")
    try:
        network.cut("b")
        assert probe(network, "a", network.address("b")) != "connected"
        network.heal("b")
        # The probe made while cut left a's ARP entry for b resolving, and a connect queued behind it waits
        # for the next ARP try (1 s apart): reachable again within a few seconds, not at once.
        give_up = time.monotonic() + 10
        while (seen := probe(network, "a", network.address("b"))) != "connected" and time.monotonic() < give_up:
            time.sleep(0.2)
        assert seen == "connected"
    finally:
        listener.kill()
        listener.wait()


def test_destroy_removes_namespaces_links_and_processes_and_may_be_repeated() -> None:
    try:
        net = netns.Network.create(["a"])
    except netns.NetnsUnavailable as exc:
        unavailable(str(exc))
    sleeper = subprocess.Popen(net.argv("a", ["sleep", "300"]))
    # ``ip netns exec`` enters the namespace before it execs the command: until then the process is not
    # among the namespace's pids, and a destroy that came first would leave it running outside any name.
    deadline = time.monotonic() + 30
    while str(sleeper.pid) not in netns.ip("netns", "pids", net.hosts["a"].netns).stdout.split():
        assert time.monotonic() < deadline, "the sleeper never entered its namespace"
        time.sleep(0.05)
    net.destroy()
    assert sleeper.wait(timeout=30) != 0  # killed with its namespace
    net.destroy()
    assert net.hosts["a"].netns not in netns.ip("netns", "list").stdout
    links = netns.ip("-o", "link", "show").stdout
    assert net.bridge not in links and net.hosts["a"].veth not in links
    assert f"10.213.{net.index}." not in netns.ip("-o", "-4", "addr", "show").stdout


def test_a_network_that_fails_half_way_leaves_nothing() -> None:
    try:
        netns.require()
    except netns.NetnsUnavailable as exc:
        unavailable(str(exc))
    before = (netns.ip("netns", "list").stdout, netns.ip("-o", "link", "show").stdout.count(netns.PREFIX))
    with pytest.raises(subprocess.CalledProcessError):
        netns.Network.create(["a", "a"])  # the second "a" collides with the first
    assert (netns.ip("netns", "list").stdout, netns.ip("-o", "link", "show").stdout.count(netns.PREFIX)) == before
