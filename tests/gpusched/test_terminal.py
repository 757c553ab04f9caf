"""gpusched.terminal as a real process: a real websocket client (aiohttp) through its front door.

Nobody without the session's token gets a byte; a command typed in arrives at a real shell on a pty and
its output comes back; resize reaches the pty; hostile frames close only their own socket; the server
outlives a broken client, ends when the last shell is exited, and hangs its shells up on SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from gpusched.terminal import config_from_env, control_message, login_shell, shell_environment

ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cret-token-of-this-session"
BASE = "/sessions/42/"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def server(tmp_path) -> Iterator[tuple[str, subprocess.Popen]]:  # noqa: ANN001
    port = free_port()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "SHELL": "/bin/bash", "PYTHONPATH": str(ROOT),
           "GPUSCHED_SESSION_HOST": "127.0.0.1", "GPUSCHED_SESSION_PORT": str(port),
           "GPUSCHED_SESSION_SECRET": SECRET, "GPUSCHED_SESSION_BASE_URL": BASE, "CHECKPOINT_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "gpusched.terminal"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def run(coroutine):  # noqa: ANN001, ANN201
    return asyncio.run(asyncio.wait_for(coroutine, timeout=30))


AUTH = {"Authorization": f"token {SECRET}"}


async def _get(url: str, headers: dict[str, str]) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as http, http.get(url, headers=headers) as answer:
        return answer.status, await answer.read()


async def _until(socket_: aiohttp.ClientWebSocketResponse, text: str) -> str:
    seen = ""
    while text not in seen:
        message = await socket_.receive()
        if message.type != aiohttp.WSMsgType.BINARY:
            raise AssertionError(f"{message.type} before {text!r}; output so far {seen[-300:]!r}")
        seen += message.data.decode("utf-8", "replace")
    return seen


@pytest.mark.parametrize("headers", [{}, {"Authorization": "token wrong"}, {"Authorization": SECRET},
                                     {"Authorization": f"Token {SECRET}x"}])
def test_no_token_no_bytes(server, headers) -> None:  # noqa: ANN001
    url, _ = server
    for path in ("health", "pty"):
        status, body = run(_get(f"{url}{BASE}{path}", headers))
        assert status == 401 and b"$" not in body and SECRET.encode() not in body


def test_health_answers_the_owner_and_unknown_paths_are_not_found(server) -> None:  # noqa: ANN001
    url, _ = server
    status, body = run(_get(f"{url}{BASE}health", AUTH))
    assert status == 200 and json.loads(body) == {"status": "ok", "kind": "terminal", "shells": 0}
    for path in (f"{BASE}../health", "/sessions/43/health", f"{BASE}pty/x", "/etc/passwd"):
        assert run(_get(url + path, AUTH))[0] == 404
    assert run(_get(f"{url}{BASE}pty", AUTH))[0] == 400  # a plain GET where a websocket is expected


def test_a_websocket_without_the_token_is_refused(server) -> None:  # noqa: ANN001
    url, _ = server

    async def attempt() -> int:
        async with aiohttp.ClientSession() as http:
            try:
                await http.ws_connect(f"{url}{BASE}pty")
            except aiohttp.WSServerHandshakeError as exc:
                return exc.status
        return 101

    assert run(attempt()) == 401


def test_a_command_runs_in_the_job_s_shell_and_its_output_comes_back(server, tmp_path) -> None:  # noqa: ANN001
    url, _ = server

    async def session() -> str:
        async with aiohttp.ClientSession() as http, http.ws_connect(f"{url}{BASE}pty", headers=AUTH) as term:
            await term.send_str(json.dumps({"resize": [123, 45]}))
            await term.send_bytes(b"echo CKPT=$CHECKPOINT_DIR SECRET=${GPUSCHED_SESSION_SECRET:-none}; stty size\n")
            seen = await _until(term, "45 123")
            await term.send_str(json.dumps({"input": "pwd > here.txt\n"}))
            await term.send_bytes(b"exit\n")
            while (await term.receive()).type == aiohttp.WSMsgType.BINARY:
                pass
            return seen

    seen = run(session())
    assert f"CKPT={tmp_path}" in seen and "SECRET=none" in seen  # the job's environment, without the secret
    assert (tmp_path / "here.txt").read_text().strip() == str(tmp_path)


def test_exiting_the_last_shell_ends_the_server(server) -> None:  # noqa: ANN001
    url, proc = server

    async def session() -> tuple[int | None, str]:
        async with aiohttp.ClientSession() as http, http.ws_connect(f"{url}{BASE}pty", headers=AUTH) as term:
            await term.send_bytes(b"exit 3\n")
            message = await term.receive()
            while message.type == aiohttp.WSMsgType.BINARY:
                message = await term.receive()
            return term.close_code, str(message.extra or "")

    code, reason = run(session())
    assert code == 1000 and "status 3" in reason
    assert proc.wait(timeout=10) == 0


@pytest.mark.parametrize("frame", ["huge", "unmasked", "bad-opcode"])
def test_hostile_frames_close_their_socket_and_the_server_serves_on(server, frame) -> None:  # noqa: ANN001
    url, proc = server
    host, port = url.removeprefix("http://").split(":")
    key = "dGhlIHNhbXBsZSBub25jZQ=="
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall((f"GET {BASE}pty HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nAuthorization: token {SECRET}\r\n\r\n")
                    .encode())
        assert raw.recv(4096).startswith(b"HTTP/1.1 101")
        raw.sendall({"huge": b"\x82\xff" + (10 ** 9).to_bytes(8, "big") + b"mask",
                     "unmasked": b"\x82\x03abc",
                     "bad-opcode": b"\x83\x80mask"}[frame])
        answer = b""
        while b"\x88" not in answer:
            chunk = raw.recv(4096)
            if not chunk:
                break
            answer += chunk
        assert b"\x88" in answer  # a close frame
    assert proc.poll() is None
    assert run(_get(f"{url}{BASE}health", AUTH))[0] == 200


def test_sigterm_hangs_up_the_shells_and_exits(server, tmp_path) -> None:  # noqa: ANN001
    url, proc = server

    async def session() -> None:
        async with aiohttp.ClientSession() as http, http.ws_connect(f"{url}{BASE}pty", headers=AUTH) as term:
            await term.send_bytes(b"echo $$ > shell.pid; echo READ\"\"Y\n")  # the echo of the input is not READY
            await _until(term, "READY")
            proc.send_signal(signal.SIGTERM)
            while (await term.receive()).type == aiohttp.WSMsgType.BINARY:
                pass

    run(session())
    assert proc.wait(timeout=10) == 0
    shell = int((tmp_path / "shell.pid").read_text())
    deadline = time.monotonic() + 10
    while Path(f"/proc/{shell}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{shell}").exists()


def test_configuration_errors_name_the_variable() -> None:
    with pytest.raises(SystemExit, match="GPUSCHED_SESSION_SECRET"):
        config_from_env({"GPUSCHED_SESSION_PORT": "1", "GPUSCHED_SESSION_BASE_URL": "/s/1/"})
    with pytest.raises(SystemExit, match="GPUSCHED_SESSION_PORT"):
        config_from_env({"GPUSCHED_SESSION_PORT": "99999", "GPUSCHED_SESSION_SECRET": "s",
                         "GPUSCHED_SESSION_BASE_URL": "/s/1/"})
    with pytest.raises(SystemExit, match="GPUSCHED_SESSION_BASE_URL"):
        config_from_env({"GPUSCHED_SESSION_PORT": "1", "GPUSCHED_SESSION_SECRET": "s",
                         "GPUSCHED_SESSION_BASE_URL": "s/1"})


@pytest.mark.parametrize("text, expected", [
    ('{"resize": [80, 24]}', ("resize", (80, 24))), ('{"input": "ls\\n"}', ("input", b"ls\n")),
    ('{"resize": [0, 24]}', None), ('{"resize": [80, 1e9]}', None), ('{"resize": [true, 24]}', None),
    ('{"resize": [80, 24], "input": "x"}', None), ("[1]", None), ("not json", None), ('{"rm": "-rf"}', None),
])
def test_control_messages(text, expected) -> None:  # noqa: ANN001
    assert control_message(text) == expected


def test_the_login_shell_comes_from_the_password_database() -> None:
    import pwd

    assert login_shell({"SHELL": "/bin/sh"}) == pwd.getpwuid(os.getuid()).pw_shell


def test_the_shell_never_sees_the_session_s_variables() -> None:
    env = shell_environment({"GPUSCHED_SESSION_SECRET": "s", "GPUSCHED_SESSION_PORT": "1", "CUDA_VISIBLE_DEVICES": "0"})
    assert env == {"CUDA_VISIBLE_DEVICES": "0", "TERM": "xterm-256color"}
