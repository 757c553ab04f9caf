"""Which URLs are a session's, and the path tricks refused before anything is forwarded."""

from __future__ import annotations

import pytest

from portal.session_paths import BadSessionPath, is_proxied, parse


@pytest.mark.parametrize("path,proxied", [
    ("/sessions/5/lab", True), ("/sessions/5/", True), ("/sessions/5/pty", True), ("/sessions/5/api/terminals/1", True),
    ("/sessions/5/terminal/", False), ("/sessions/5/terminal", False), ("/sessions/5/terminal/x.js", False),
    ("/sessions/new/", False), ("/sessions/", False), ("/sessions/05/lab", False), ("/jobs/5/", False),
    ("/sessions/5", False),
])
def test_is_proxied(path: str, proxied: bool) -> None:
    assert is_proxied(path) is proxied


def test_parse_keeps_the_raw_path_and_query() -> None:
    where = parse({"path": "/sessions/5/files/a b.txt", "raw_path": b"/sessions/5/files/a%20b.txt",
                   "query_string": b"x=1&y=%2F"})
    assert (where.job_id, where.raw_path, where.query) == (5, "/sessions/5/files/a%20b.txt", "x=1&y=%2F")


def test_parse_without_raw_path_quotes_the_decoded_one() -> None:
    assert parse({"path": "/sessions/5/files/a b.txt"}).raw_path == "/sessions/5/files/a%20b.txt"


@pytest.mark.parametrize("raw", [b"/sessions/5/../6/lab", b"/sessions/5/%2E%2E/6/lab", b"/sessions/5/.%2e/x",
                                 b"/sessions/5/a%2Fb", b"/sessions/5/a%5Cb", b"/sessions/5/a\\b", b"/sessions/5/%00",
                                 b"/sessions/5/%0a", b"/sessions/5/a\tb", b"/other/5/lab", b"/sessions/x/lab"])
def test_parse_refuses_tricks(raw: bytes) -> None:
    with pytest.raises(BadSessionPath):
        parse({"path": raw.decode(), "raw_path": raw})


def test_parse_refuses_control_characters_in_the_query() -> None:
    with pytest.raises(BadSessionPath):
        parse({"path": "/sessions/5/lab", "raw_path": b"/sessions/5/lab", "query_string": b"a=\r\nb"})
