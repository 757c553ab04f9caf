"""The logs endpoint's query: each bad value named by its field, offset and tail exclusive."""

from __future__ import annotations

import pytest

from portal.api.log_query import LOG_PAGE_MAX_LINES, log_query


def test_a_valid_query_gives_its_numbers_and_no_errors():
    assert log_query({"attempt": "2", "offset": "0", "limit": "50"}) == ({"attempt": 2, "offset": 0, "limit": 50}, {})
    assert log_query({"tail": "10", "offset": ""}) == ({"tail": 10}, {})
    assert log_query({}) == ({}, {})


@pytest.mark.parametrize("params, field", [
    ({"attempt": "0"}, "attempt"),
    ({"attempt": "-1"}, "attempt"),
    ({"offset": "-1"}, "offset"),
    ({"offset": "1e3"}, "offset"),
    ({"limit": "0"}, "limit"),
    ({"limit": str(LOG_PAGE_MAX_LINES + 1)}, "limit"),
    ({"tail": "0"}, "tail"),
    ({"tail": "١٢"}, "tail"),  # digits of another script: isdigit() alone takes them
    ({"offset": "²"}, "offset"),  # isdigit() takes it, int() does not: a 500 if not refused here
    ({"offset": "3", "tail": "2"}, "tail"),
])
def test_each_bad_value_is_named_by_its_field(params, field):
    numbers, errors = log_query(params)
    assert field in errors and list(errors) == [field]
