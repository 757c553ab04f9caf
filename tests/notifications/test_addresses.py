"""Webhook URLs reaching the internal network are refused, by name and by address."""

from __future__ import annotations

import pytest

from notifications import addresses


@pytest.mark.parametrize("url, reason", [
    ("http://127.0.0.1:8000/hook", "loopback"), ("http://localhost/hook", "loopback"),
    ("http://10.1.2.3/", "private"), ("http://192.168.0.5/", "private"), ("http://172.16.0.1/", "private"),
    ("http://169.254.169.254/latest/meta-data/", "link-local"), ("http://[::1]/", "loopback"),
    ("http://[fe80::1]/", "link-local"), ("http://224.0.0.1/", "multicast"), ("http://0.0.0.0/", "unspecified"),
    ("http://[::ffff:10.0.0.1]/", "private"), ("http://240.0.0.1/", "reserved"),
])
def test_private_loopback_link_local_multicast_and_reserved_addresses_are_refused(url, reason) -> None:
    with pytest.raises(addresses.RefusedUrl, match=reason):
        addresses.check(url)


def test_an_admin_may_allow_a_private_address_and_a_public_one_passes() -> None:
    assert addresses.check("http://127.0.0.1:9/x?y=1", allow_private=True).path == "/x?y=1"
    target = addresses.check("https://93.184.216.34/hook")
    assert (target.address, target.port, target.scheme) == ("93.184.216.34", 443, "https")


@pytest.mark.parametrize("url, message", [
    ("ftp://93.184.216.34/", "http:// or https://"), ("http://user:pw@93.184.216.34/", "user name"),
    ("http://no-such-host.invalid/", "does not resolve"), ("http:///path", "no host"),
])
def test_malformed_urls_say_why(url, message) -> None:
    with pytest.raises(addresses.RefusedUrl, match=message):
        addresses.check(url)
