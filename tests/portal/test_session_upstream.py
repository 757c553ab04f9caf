"""What goes to a session's server and what comes back: cookies, credentials and the secret stay out."""

from __future__ import annotations

from portal.session_upstream import Scrubber, request_headers, response_headers

SECRET = "Z" * 43


def test_request_headers_drop_the_portal_credentials_and_add_the_secret() -> None:
    out = dict(request_headers([(b"Cookie", b"sessionid=1"), (b"Authorization", b"Basic x"), (b"Origin", b"http://p"),
                                (b"Host", b"p"), (b"Accept", b"*/*"), (b"Connection", b"keep-alive"),
                                (b"X-Forwarded-For", b"1.2.3.4")], SECRET))
    assert out == {"accept": "*/*", "authorization": f"token {SECRET}", "accept-encoding": "identity"}


def test_websocket_handshake_headers_leave_the_handshake_to_the_client() -> None:
    out = dict(request_headers([(b"Sec-WebSocket-Key", b"k"), (b"Sec-WebSocket-Protocol", b"p"), (b"Upgrade", b"websocket"),
                                (b"User-Agent", b"ua")], SECRET, websocket=True))
    assert out == {"user-agent": "ua", "authorization": f"token {SECRET}"}


def test_response_headers_drop_cookies_the_secret_and_the_servers_address() -> None:
    out = response_headers([("Set-Cookie", "a=b"), ("X-Token", f"t={SECRET}"), ("Content-Type", "text/html"),
                            ("Location", "http://10.0.0.5:8888/sessions/5/lab"), ("Content-Length", "3")],
                           SECRET, "http://10.0.0.5:8888")
    assert out == [(b"content-type", b"text/html"), (b"location", b"/sessions/5/lab")]


def test_scrubber_masks_the_secret_even_split_across_chunks() -> None:
    body = b"<html>" + SECRET.encode() + b" and " + SECRET.encode() + b"</html>"
    for cut in range(1, len(body)):
        s = Scrubber(SECRET)
        out = s.feed(body[:cut]) + s.feed(body[cut:]) + s.finish()
        assert out == body.replace(SECRET.encode(), b"*" * 43)


def test_scrubber_frames_keep_their_length() -> None:
    s = Scrubber(SECRET)
    assert s.text(f"x{SECRET}y") == "x" + "*" * 43 + "y"
    assert len(s.frame(b"\x00" + SECRET.encode())) == 44 and SECRET.encode() not in s.frame(SECRET.encode())
