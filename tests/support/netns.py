"""Hosts made of Linux network namespaces on one machine, joined by a private bridge.

``Network`` creates a bridge ``gsmh<N>br`` with the address 10.213.N.1/24 and,
per host, a namespace ``gsmh<N>-<host>`` whose ``eth0`` (10.213.N.k/24) is one
end of a veth pair whose other end (``gsmh<N>-<k>``) is plugged into the bridge.
The namespaces get no default route and the bridge is not forwarded anywhere,
so nothing started in them can send traffic beyond 10.213.N.0/24; the machine
itself reaches them through the bridge's address (that is how a test talks to
its services). ``cut(host)`` unplugs a host (its veth end on the bridge goes
down: the host keeps its interface and address, as when a cable or a switch
port fails); ``heal(host)`` plugs it back.

``destroy()`` SIGKILLs every process still in the namespaces (``ip netns pids``),
then removes the namespaces, their veths and the bridge; it never raises and may
be called twice. ``remove_leftovers()`` does the same for every ``gsmh*``
network found on the machine (a run that was itself SIGKILLed).

Needs root and iproute2 (``ip``). Standard library only.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field

PREFIX = "gsmh"
SUBNETS = "10.213.{index}.0/24"


class NetnsUnavailable(RuntimeError):
    """This machine cannot make namespaces (not root, or no iproute2)."""


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def require() -> None:
    if shutil.which("ip") is None:
        raise NetnsUnavailable("iproute2 ('ip') is not installed")
    if os.geteuid() != 0:
        raise NetnsUnavailable("network namespaces need root")


def _used_indices() -> set[int]:
    """Indices N taken by a gsmh<N>br bridge or by any address in 10.213.N.0/24 on this machine."""
    used = {int(m) for m in re.findall(rf"\b{PREFIX}(\d+)br\b", ip("-o", "link", "show").stdout)}
    for address in re.findall(r"inet (\d+\.\d+\.\d+\.\d+)/", ip("-o", "-4", "addr", "show").stdout):
        parts = address.split(".")
        if parts[:2] == ["10", "213"]:
            used.add(int(parts[2]))
    return used


@dataclass
class Host:
    name: str
    netns: str
    veth: str  # the end plugged into the bridge, in the machine's own namespace
    address: str


@dataclass
class Network:
    index: int
    hosts: dict[str, Host] = field(default_factory=dict)

    @property
    def bridge(self) -> str:
        return f"{PREFIX}{self.index}br"

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(SUBNETS.format(index=self.index))

    @property
    def gateway(self) -> str:
        """The bridge's address: where the machine itself (the test) sits on the network."""
        return str(self.subnet.network_address + 1)

    @classmethod
    def create(cls, host_names: list[str], index: int | None = None) -> Network:
        """A new network with ``host_names`` plugged in; on any error whatever was made is removed."""
        require()
        if index is None:
            free = sorted(set(range(1, 255)) - _used_indices())
            if not free:
                raise NetnsUnavailable("no free 10.213.N.0/24")
            index = free[0]
        net = cls(index)
        try:
            ip("link", "add", net.bridge, "type", "bridge")
            ip("addr", "add", f"{net.gateway}/24", "dev", net.bridge)
            ip("link", "set", net.bridge, "up")
            for name in host_names:
                net.add_host(name)
        except BaseException:
            net.destroy()
            raise
        return net

    def add_host(self, name: str) -> Host:
        k = len(self.hosts) + 2
        host = Host(name, f"{PREFIX}{self.index}-{name}", f"{PREFIX}{self.index}-{k}", str(self.subnet.network_address + k))
        self.hosts[name] = host
        ip("netns", "add", host.netns)
        ip("link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.netns)
        ip("link", "set", host.veth, "master", self.bridge, "up")
        ns = ("-n", host.netns)
        ip(*ns, "addr", "add", f"{host.address}/24", "dev", "eth0")
        ip(*ns, "link", "set", "eth0", "up")
        ip(*ns, "link", "set", "lo", "up")
        return host

    def address(self, host: str) -> str:
        return self.hosts[host].address

    def argv(self, host: str, argv: list[str]) -> list[str]:
        """``argv`` run in ``host``'s namespace (``ip netns exec`` execs it: the pid is the command's)."""
        return ["ip", "netns", "exec", self.hosts[host].netns, *argv]

    def cut(self, host: str) -> None:
        ip("link", "set", self.hosts[host].veth, "down")

    def heal(self, host: str) -> None:
        ip("link", "set", self.hosts[host].veth, "up")

    def pids(self, host: str) -> list[int]:
        result = ip("netns", "pids", self.hosts[host].netns, check=False)
        return [int(p) for p in result.stdout.split()]

    def destroy(self) -> None:
        _destroy(self.bridge, [h.netns for h in self.hosts.values()], [h.veth for h in self.hosts.values()])


def _destroy(bridge: str, namespaces: list[str], veths: list[str]) -> None:
    for netns in namespaces:
        for _ in range(50):
            pids = [int(p) for p in ip("netns", "pids", netns, check=False).stdout.split()]
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        ip("netns", "del", netns, check=False)
    for veth in veths:
        ip("link", "del", veth, check=False)  # normally gone with its peer's namespace
    ip("link", "del", bridge, check=False)


def remove_leftovers(index: int | None = None) -> list[str]:
    """Remove every gsmh network (or only number ``index``) on this machine; return the bridges removed."""
    require()
    namespaces = [line.split()[0] for line in ip("netns", "list").stdout.splitlines() if line.strip()]
    links = re.findall(rf"^\d+: ({PREFIX}\d+(?:br|-\d+))[@:]", ip("-o", "link", "show").stdout, flags=re.MULTILINE)
    indices = {int(m) for name in namespaces + links for m in re.findall(rf"^{PREFIX}(\d+)", name)}
    if index is not None:
        indices &= {index}
    for n in sorted(indices):
        _destroy(f"{PREFIX}{n}br", [ns for ns in namespaces if ns.startswith(f"{PREFIX}{n}-")],
                 [link for link in links if link.startswith(f"{PREFIX}{n}-")])
    return [f"{PREFIX}{n}br" for n in sorted(indices)]
