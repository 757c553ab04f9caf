"""Webhook URLs: refuse those that reach the internal network, and send to the address that was checked.

A URL is checked when it is saved and again at every delivery: the host name
is resolved and every address it resolves to must be a public one (not
private, loopback, link-local, multicast, reserved or unspecified), unless an
administrator allowed private addresses for that webhook. The delivery then
connects to the very address that passed the check (``pinned_post``), with the
original host name in ``Host`` and in TLS (SNI and certificate check), so a
name that resolves differently a moment later (DNS rebinding) cannot redirect
the request. Redirects are not followed.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

import urllib3

TIMEOUT_S = 5.0


class RefusedUrl(ValueError):
    """The URL may not be used; the message says why (shown to the user)."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str
    port: int
    path: str  # path and query
    address: str  # the checked IP to connect to


def forbidden_reason(address: str) -> str | None:
    """Why ``address`` is not a public address, or None when it is."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for name in ("loopback", "link_local", "multicast", "unspecified", "reserved", "private"):
        if getattr(ip, f"is_{name}"):
            return name.replace("_", "-")
    if not ip.is_global:
        return "not globally routable"
    return None


def check(url: str, *, allow_private: bool = False) -> Target:
    """Resolve ``url``'s host and return where to connect; RefusedUrl with the reason otherwise."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise RefusedUrl("the URL must start with http:// or https://")
    if not parts.hostname:
        raise RefusedUrl("the URL has no host")
    if parts.username or parts.password:
        raise RefusedUrl("the URL must not carry a user name or password")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise RefusedUrl("the URL's port is not a number 0-65535") from None
    try:
        infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise RefusedUrl(f"the host {parts.hostname!r} does not resolve ({exc})") from None
    addresses = list(dict.fromkeys(info[4][0] for info in infos))
    if not allow_private:
        for address in addresses:
            reason = forbidden_reason(address)
            if reason:
                raise RefusedUrl(f"the host {parts.hostname!r} resolves to {address}, a {reason} address; webhooks "
                                 "may only call public addresses (an administrator can allow this one)")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, parts.hostname, port, path, addresses[0])


def pinned_post(target: Target, body: bytes, headers: dict[str, str]) -> int:
    """POST ``body`` to ``target.address``; returns the HTTP status. Raises urllib3 errors on failure."""
    default_port = 443 if target.scheme == "https" else 80
    host_header = target.host if target.port == default_port else f"{target.host}:{target.port}"
    timeout = urllib3.Timeout(connect=TIMEOUT_S, read=TIMEOUT_S)
    if target.scheme == "https":
        pool = urllib3.HTTPSConnectionPool(target.address, target.port, timeout=timeout, retries=False,
                                           server_hostname=target.host, assert_hostname=target.host)
    else:
        pool = urllib3.HTTPConnectionPool(target.address, target.port, timeout=timeout, retries=False)
    try:
        response = pool.urlopen("POST", target.path, body=body, headers={**headers, "Host": host_header},
                                redirect=False, preload_content=False)
        response.read(64 * 1024)  # the answer is not used; read a little so the connection ends cleanly
        response.release_conn()
        return response.status
    finally:
        pool.close()
