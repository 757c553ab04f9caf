"""Just enough HTTP/1.1 and RFC 6455 (WebSocket) for a session server inside a job, on asyncio and the
standard library alone (a job's image need not have any web framework).

What it does: read one request head, answer a plain response, accept a websocket handshake, read
client frames (masked, possibly fragmented, with control frames between fragments) and write server
frames (unmasked). What it refuses, with an exception the server turns into a status or a close code:
a request head over ``MAX_HEAD`` bytes or malformed (400), a frame over the caller's size limit (close
1009), an unmasked client frame, a reserved bit or opcode, a fragmented control frame (close 1002).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import struct
from dataclasses import dataclass

MAX_HEAD = 16 * 1024
GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
DATA_OPCODES = (TEXT, BINARY)
CONTROL_OPCODES = (CLOSE, PING, PONG)

CLOSE_NORMAL, CLOSE_GOING_AWAY, CLOSE_PROTOCOL, CLOSE_TOO_BIG, CLOSE_POLICY = 1000, 1001, 1002, 1009, 1008


class BadRequest(Exception):
    """The request head cannot be read as HTTP/1.1."""


class ProtocolError(Exception):
    """A frame breaks RFC 6455; ``code`` is the close code to answer with."""

    def __init__(self, message: str, code: int = CLOSE_PROTOCOL) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names; a repeated header keeps its last value

    def is_websocket(self) -> bool:
        return (self.headers.get("upgrade", "").lower() == "websocket"
                and "upgrade" in self.headers.get("connection", "").lower()
                and self.headers.get("sec-websocket-version") == "13" and bool(self.headers.get("sec-websocket-key")))


async def read_request(reader: asyncio.StreamReader) -> Request:
    """The request head (line and headers) of one request; BadRequest if malformed or over MAX_HEAD."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise BadRequest("request head too large") from None
    except asyncio.IncompleteReadError:
        raise BadRequest("connection closed before the request head ended") from None
    if len(head) > MAX_HEAD:
        raise BadRequest("request head too large")
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, path, version = lines[0].split(" ")
    except ValueError:
        raise BadRequest("malformed request line") from None
    if not version.startswith("HTTP/1.") or not path.startswith("/"):
        raise BadRequest("not an HTTP/1.x request for a path")
    headers = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadRequest("malformed header line")
        headers[name.lower()] = value.strip()
    return Request(method, path, headers)


def response(status: int, reason: str, body: bytes = b"", content_type: str = "text/plain; charset=utf-8") -> bytes:
    """A complete HTTP/1.1 response that closes the connection."""
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\nCache-Control: no-store\r\n\r\n").encode("latin-1") + body


def accept_value(key: str) -> str:
    """``Sec-WebSocket-Accept`` for the client's ``Sec-WebSocket-Key``."""
    return base64.b64encode(hashlib.sha1((key + GUID).encode("latin-1")).digest()).decode("ascii")


def handshake(request: Request) -> bytes:
    """The 101 answer accepting ``request``'s websocket upgrade."""
    return ("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Accept: {accept_value(request.headers['sec-websocket-key'])}\r\n\r\n").encode("latin-1")


def encode_frame(opcode: int, payload: bytes = b"") -> bytes:
    """One unmasked, final server frame."""
    size = len(payload)
    if size < 126:
        head = struct.pack("!BB", 0x80 | opcode, size)
    elif size < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 126, size)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, size)
    return head + payload


def close_frame(code: int, reason: str = "") -> bytes:
    return encode_frame(CLOSE, struct.pack("!H", code) + reason.encode("utf-8")[:120])


async def _read_one(reader: asyncio.StreamReader, max_size: int) -> tuple[bool, int, bytes]:
    """One frame: (final, opcode, unmasked payload)."""
    first, second = await reader.readexactly(2)
    if first & 0x70:
        raise ProtocolError("reserved bits set")
    final, opcode = bool(first & 0x80), first & 0x0F
    if opcode not in (CONTINUATION, *DATA_OPCODES, *CONTROL_OPCODES):
        raise ProtocolError(f"unknown opcode {opcode}")
    if not second & 0x80:
        raise ProtocolError("client frames must be masked")
    size = second & 0x7F
    if size == 126:
        (size,) = struct.unpack("!H", await reader.readexactly(2))
    elif size == 127:
        (size,) = struct.unpack("!Q", await reader.readexactly(8))
    if opcode in CONTROL_OPCODES and (size > 125 or not final):
        raise ProtocolError("control frames are short and never fragmented")
    if size > max_size:
        raise ProtocolError(f"frame of {size} bytes; at most {max_size}", CLOSE_TOO_BIG)
    mask = await reader.readexactly(4)
    data = bytearray(await reader.readexactly(size))
    for i in range(size):  # frames here are keystrokes and small control messages
        data[i] ^= mask[i % 4]
    return final, opcode, bytes(data)


async def read_message(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_size: int) -> tuple[int, bytes]:
    """The next data message (TEXT or BINARY, fragments joined) or a CLOSE; PINGs are answered on the way.

    Raises ProtocolError for a broken or oversized message, asyncio.IncompleteReadError when the peer
    disconnects without a close frame.
    """
    opcode, parts, total = None, [], 0
    while True:
        final, frame_opcode, payload = await _read_one(reader, max_size)
        if frame_opcode == PING:
            writer.write(encode_frame(PONG, payload))
            continue
        if frame_opcode == PONG:
            continue
        if frame_opcode == CLOSE:
            return CLOSE, payload
        if (frame_opcode == CONTINUATION) == (opcode is None):
            raise ProtocolError("continuation out of place")
        opcode = frame_opcode if opcode is None else opcode
        total += len(payload)
        if total > max_size:
            raise ProtocolError(f"message over {max_size} bytes", CLOSE_TOO_BIG)
        parts.append(payload)
        if final:
            return opcode, b"".join(parts)
