"""The session contract: kinds in a launch's env, and the checks of REPORT_SESSION."""

from __future__ import annotations

import pytest

from cluster import session_contract as contract
from cluster.protocol import ProtocolError

SECRET = "a" * 43


def test_base_url_is_the_portal_prefix() -> None:
    assert contract.base_url(42) == "/sessions/42/"


def test_session_kind() -> None:
    assert contract.session_kind({}) == ""
    assert contract.session_kind({contract.ENV_SESSION: "jupyter"}) == "jupyter"
    for bad in ("Jupyter", "a b", "x" * 40, "jupyter\n"):
        with pytest.raises(ProtocolError):
            contract.session_kind({contract.ENV_SESSION: bad})


def test_a_good_endpoint() -> None:
    assert contract.check_endpoint({"host": "10.0.0.5", "port": 8888, "secret": SECRET}) == ("10.0.0.5", 8888, SECRET)


@pytest.mark.parametrize("field,value", [("host", ""), ("host", "a b"), ("host", "x;rm"), ("port", 0), ("port", 70000),
                                         ("port", "80"), ("port", True), ("secret", "short"), ("secret", "a" * 42 + "\n"),
                                         ("secret", None)])
def test_a_bad_endpoint_names_the_field_and_never_echoes_the_secret(field, value) -> None:  # noqa: ANN001
    fields = {"host": "10.0.0.5", "port": 8888, "secret": SECRET, field: value}
    with pytest.raises(ProtocolError) as info:
        contract.check_endpoint(fields)
    assert info.value.field == field
    if field == "secret" and isinstance(value, str):
        assert value.strip() not in str(info.value)
