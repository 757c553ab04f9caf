"""gpusched.websocket against RFC 6455's own examples and hostile frames."""

from __future__ import annotations

import asyncio
import struct

import pytest

from gpusched import websocket as ws


def masked(opcode: int, payload: bytes, final: bool = True, mask: bytes = b"\x37\xfa\x21\x3d") -> bytes:
    size = len(payload)
    head = bytes([(0x80 if final else 0) | opcode])
    if size < 126:
        head += bytes([0x80 | size])
    elif size < 1 << 16:
        head += bytes([0x80 | 126]) + struct.pack("!H", size)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", size)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


class Sink:
    def __init__(self) -> None:
        self.written = b""

    def write(self, data: bytes) -> None:
        self.written += data


def read(data: bytes, max_size: int = 1024) -> tuple[tuple[int, bytes], bytes]:
    async def go() -> tuple[tuple[int, bytes], bytes]:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        sink = Sink()
        return await ws.read_message(reader, sink, max_size), sink.written  # type: ignore[arg-type]

    return asyncio.run(go())


def test_the_accept_value_of_the_rfc_example() -> None:
    assert ws.accept_value("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def test_the_rfc_masked_hello() -> None:
    assert read(bytes.fromhex("818537fa213d7f9f4d5158"))[0] == (ws.TEXT, b"Hello")


def test_fragments_are_joined_and_a_ping_between_them_is_answered() -> None:
    data = masked(ws.TEXT, b"Hel", final=False) + masked(ws.PING, b"hi") + masked(ws.CONTINUATION, b"lo")
    message, written = read(data)
    assert message == (ws.TEXT, b"Hello") and written == ws.encode_frame(ws.PONG, b"hi")


@pytest.mark.parametrize("size", [0, 125, 126, 65535, 65536])
def test_server_frames_use_the_shortest_length(size: int) -> None:
    frame = ws.encode_frame(ws.BINARY, b"x" * size)
    assert frame[0] == 0x82 and len(frame) - size == (2 if size < 126 else 4 if size < 65536 else 10)


@pytest.mark.parametrize("data, code", [
    (masked(ws.BINARY, b"x" * 2000), ws.CLOSE_TOO_BIG),
    (b"\x82\x03abc", ws.CLOSE_PROTOCOL),                       # unmasked
    (b"\xc2\x80mask", ws.CLOSE_PROTOCOL),                      # a reserved bit
    (masked(0x3, b""), ws.CLOSE_PROTOCOL),                     # a reserved opcode
    (masked(ws.PING, b"x", final=False), ws.CLOSE_PROTOCOL),   # a fragmented control frame
    (masked(ws.CONTINUATION, b"x"), ws.CLOSE_PROTOCOL),        # nothing to continue
    (masked(ws.TEXT, b"a" * 600, final=False) + masked(ws.CONTINUATION, b"b" * 600), ws.CLOSE_TOO_BIG),
])
def test_hostile_frames_raise_with_their_close_code(data: bytes, code: int) -> None:
    with pytest.raises(ws.ProtocolError) as caught:
        read(data)
    assert caught.value.code == code


def test_a_peer_gone_mid_frame_is_an_incomplete_read() -> None:
    with pytest.raises(asyncio.IncompleteReadError):
        read(masked(ws.BINARY, b"abcdef")[:5])


def test_request_heads_are_parsed_and_malformed_ones_refused() -> None:
    async def parse(raw: bytes) -> ws.Request:
        reader = asyncio.StreamReader(limit=ws.MAX_HEAD)
        reader.feed_data(raw)
        reader.feed_eof()
        return await ws.read_request(reader)

    request = asyncio.run(parse(b"GET /s/1/pty HTTP/1.1\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n"
                                b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: k\r\n\r\n"))
    assert (request.method, request.path, request.is_websocket()) == ("GET", "/s/1/pty", True)
    for raw in (b"GET /x\r\n\r\n", b"GET http://evil/ HTTP/1.1\r\n\r\n", b"GET /x HTTP/1.1\r\n bad\r\n\r\n",
                b"GET /x HTTP/1.1\r\nX: " + b"a" * (ws.MAX_HEAD + 10) + b"\r\n\r\n", b"GET /x HTTP/1.1\r\n"):
        with pytest.raises(ws.BadRequest):
            asyncio.run(parse(raw))
