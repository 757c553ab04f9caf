"""The test CA's server certificate: a redis-server serves TLS with it, a client that trusts the CA
and checks the address connects, one that trusts another CA or connects in clear does not."""

from __future__ import annotations

import pytest
import redis

from tests.support.tls import make_certificates


@pytest.fixture
def tls_redis(private_redis, tmp_path):  # noqa: ANN001, ANN201
    from tests.adversarial.stack import free_port

    files = make_certificates(tmp_path / "tls", "127.0.0.1")
    tls_port = free_port()
    server = private_redis.start_another(("--tls-port", str(tls_port), "--tls-cert-file", str(files.cert),
                                          "--tls-key-file", str(files.key), "--tls-ca-cert-file", str(files.ca),
                                          "--tls-auth-clients", "no"), where="tls")
    return server, tls_port, files


@pytest.mark.redis
def test_a_client_trusting_the_ca_connects_over_tls_and_others_do_not(tls_redis, tmp_path) -> None:  # noqa: ANN001
    server, tls_port, files = tls_redis
    trusted = f"rediss://127.0.0.1:{tls_port}/0?ssl_cert_reqs=required&ssl_ca_certs={files.ca}"
    assert redis.Redis.from_url(trusted).ping()
    other = make_certificates(tmp_path / "other", "127.0.0.1")
    with pytest.raises(redis.exceptions.ConnectionError, match="certificate verify failed"):
        redis.Redis.from_url(f"rediss://127.0.0.1:{tls_port}/0?ssl_cert_reqs=required&ssl_ca_certs={other.ca}").ping()
    with pytest.raises(redis.exceptions.ConnectionError):
        redis.Redis.from_url(f"redis://127.0.0.1:{tls_port}/0", socket_timeout=2).ping()


def test_the_key_is_readable_by_its_owner_only(tmp_path) -> None:  # noqa: ANN001
    files = make_certificates(tmp_path, "10.213.0.2")
    assert files.key.stat().st_mode & 0o077 == 0
    assert b"BEGIN CERTIFICATE" in files.ca.read_bytes() and b"BEGIN CERTIFICATE" in files.cert.read_bytes()
