"""``python -m gpusched.terminal``: a terminal session's server, the job's own process on its node.

The agent starts it as the job of a session of kind ``terminal`` (docs/sessions.md) with:

* ``GPUSCHED_SESSION_HOST`` and ``GPUSCHED_SESSION_PORT``: where to listen;
* ``GPUSCHED_SESSION_SECRET``: every request must carry ``Authorization: token <secret>``; the portal's
  proxy adds it after checking that the browser is the session's owner, so nobody else gets a byte;
* ``GPUSCHED_SESSION_BASE_URL``: the portal's prefix, ``/sessions/<job id>/``.

It answers ``GET <base>health`` (JSON) and a websocket at ``<base>pty``: each websocket gets its own
shell (the user's login shell, see ``login_shell``) on a new pty, in the job's working directory and environment (its
GPUs, its checkpoint directory; the session's variables removed). Binary frames are keystrokes; a
text frame is a JSON control message, ``{"resize": [cols, rows]}`` or ``{"input": "..."}``; output
goes back in binary frames. Closing the websocket hangs up its shell; a shell that ends by itself
closes its websocket, and when it was the last one the server exits (the session's job completes).
SIGTERM (the session stopped, preempted or out of time) hangs up every shell and exits.

Standard library only, like the rest of ``gpusched``: it runs in the job's image.
"""

from __future__ import annotations

import asyncio
import fcntl
import hmac
import json
import logging
import os
import pty
import signal
import struct
import sys
import termios
from collections.abc import Mapping
from dataclasses import dataclass

from gpusched import websocket as ws

# The names cluster/session_contract.py gives them (the job side cannot import the server's code).
ENV_HOST, ENV_PORT = "GPUSCHED_SESSION_HOST", "GPUSCHED_SESSION_PORT"
ENV_SECRET, ENV_BASE_URL = "GPUSCHED_SESSION_SECRET", "GPUSCHED_SESSION_BASE_URL"

MAX_INPUT_FRAME = 64 * 1024  # a paste; keystrokes are a few bytes
MAX_SHELLS = 4
MAX_COLUMNS_ROWS = 1000
OUTPUT_CHUNK = 64 * 1024
HANGUP_GRACE_S = 2.0

log = logging.getLogger("gpusched.terminal")


@dataclass(frozen=True)
class Config:
    host: str
    port: int
    secret: str
    base_url: str
    shell: str


def config_from_env(environ: Mapping[str, str]) -> Config:
    """The server's settings; SystemExit naming the variable that is missing or wrong."""
    missing = [name for name in (ENV_PORT, ENV_SECRET, ENV_BASE_URL) if not environ.get(name)]
    if missing:
        raise SystemExit(f"gpusched.terminal: {missing[0]} is not set (the agent sets it for a terminal session)")
    try:
        port = int(environ[ENV_PORT])
    except ValueError:
        port = 0
    if not 0 < port < 65536:
        raise SystemExit(f"gpusched.terminal: {ENV_PORT} must be a TCP port, not {environ[ENV_PORT]!r}")
    base = environ[ENV_BASE_URL]
    if not (base.startswith("/") and base.endswith("/")):
        raise SystemExit(f"gpusched.terminal: {ENV_BASE_URL} must start and end with '/', not {base!r}")
    return Config(environ.get(ENV_HOST) or "127.0.0.1", port, environ[ENV_SECRET], base, login_shell(environ))


def login_shell(environ: Mapping[str, str]) -> str:
    """The user's login shell from the password database (jobs get SHELL=/bin/sh whoever runs them), else
    $SHELL, else /bin/sh; an account whose shell refuses logins (nologin, false) gets /bin/sh."""
    import pwd

    try:
        shell = pwd.getpwuid(os.getuid()).pw_shell
    except KeyError:
        shell = ""
    if shell and os.access(shell, os.X_OK) and not shell.endswith(("nologin", "false")):
        return shell
    return environ.get("SHELL") or "/bin/sh"


def shell_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The job's environment for its shells: the session's own variables (the secret) left out."""
    env = {k: v for k, v in environ.items() if not k.startswith("GPUSCHED_SESSION_")}
    env["TERM"] = "xterm-256color"
    return env


def control_message(text: str) -> tuple[str, object] | None:
    """A text frame as ("resize", (cols, rows)) or ("input", bytes); None when it is neither."""
    try:
        message = json.loads(text)
    except ValueError:
        return None
    if not isinstance(message, dict) or len(message) != 1:
        return None
    if "input" in message and isinstance(message["input"], str):
        return "input", message["input"].encode("utf-8", "replace")
    size = message.get("resize")
    if (isinstance(size, list) and len(size) == 2 and all(type(v) is int for v in size)
            and all(1 <= v <= MAX_COLUMNS_ROWS for v in size)):
        return "resize", (size[0], size[1])
    return None


class Shell:
    """A shell on a new pty, session leader of its own process group."""

    def __init__(self, program: str, env: dict[str, str]) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: become the shell, never return into the server's code
            try:
                os.execvpe(program, [program], env)
            finally:
                os._exit(127)
        self.pid, self.fd, self.hung_up = pid, fd, False
        self.output_done = asyncio.Event()  # set when the pty has nothing more to say

    def resize(self, cols: int, rows: int) -> None:
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    async def write(self, data: bytes) -> None:
        """Write all of ``data`` to the pty (a full input buffer waits instead of dropping keystrokes)."""
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.fd, view):]
            except BlockingIOError:
                await asyncio.sleep(0.01)

    def hang_up(self) -> None:
        """SIGHUP the shell's process group now, SIGKILL it after HANGUP_GRACE_S."""
        self.hung_up = True
        _signal_group(self.pid, signal.SIGHUP)
        asyncio.get_running_loop().call_later(HANGUP_GRACE_S, _signal_group, self.pid, signal.SIGKILL)

    async def exit_status(self) -> int | None:
        """The shell's exit status once it has ended (None if it is still running a second later)."""
        for _ in range(100):
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            await asyncio.sleep(0.01)
        return None


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


class TerminalServer:
    """Serves one session until its last shell ends by itself or it is told to stop."""

    def __init__(self, config: Config, environ: Mapping[str, str]) -> None:
        self.config = config
        self.shell_env = shell_environment(environ)
        self.shells: set[Shell] = set()
        self.done = asyncio.Event()

    def authorised(self, request: ws.Request) -> bool:
        given = request.headers.get("authorization", "")
        return hmac.compare_digest(given.encode("latin-1", "replace"), f"token {self.config.secret}".encode())

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(ws.read_request(reader), timeout=30)
            path = request.path.split("?", 1)[0]
            if not self.authorised(request):
                writer.write(ws.response(401, "Unauthorized", b"a session token is required\n"))
            elif request.method == "GET" and path == self.config.base_url + "health":
                body = json.dumps({"status": "ok", "kind": "terminal", "shells": len(self.shells)}).encode()
                writer.write(ws.response(200, "OK", body, "application/json"))
            elif path != self.config.base_url + "pty":
                writer.write(ws.response(404, "Not Found", b"not found\n"))
            elif request.method != "GET" or not request.is_websocket():
                writer.write(ws.response(400, "Bad Request", b"a websocket handshake is expected here\n"))
            elif len(self.shells) >= MAX_SHELLS:
                writer.write(ws.response(429, "Too Many Requests", f"at most {MAX_SHELLS} shells\n".encode()))
            else:
                writer.write(ws.handshake(request))
                await self.run_shell(reader, writer)
        except (ws.BadRequest, asyncio.TimeoutError):
            writer.write(ws.response(400, "Bad Request", b"malformed request\n"))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def run_shell(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        shell = Shell(self.config.shell, self.shell_env)
        self.shells.add(shell)
        output = asyncio.create_task(self.pump_output(shell, writer))
        try:
            code, reason = await self.pump_input(shell, reader, writer)
        finally:
            if not output.done():
                shell.hang_up()
            status = await self._ended(shell, output)
        if code is None:  # the shell ended first
            code, reason = ws.CLOSE_NORMAL, f"shell exited with status {status}"
        writer.write(ws.close_frame(code, reason))
        await _drain(writer)

    async def pump_output(self, shell: Shell, writer: asyncio.StreamWriter) -> None:
        """pty -> websocket until the pty closes (the shell and all it started have ended or hung up)."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=OUTPUT_CHUNK)
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                                    os.fdopen(os.dup(shell.fd), "rb", buffering=0))
        os.set_blocking(shell.fd, False)
        try:
            while chunk := await reader.read(OUTPUT_CHUNK):
                writer.write(ws.encode_frame(ws.BINARY, chunk))
                await writer.drain()  # a slow browser slows the shell down instead of filling memory
        except (OSError, ConnectionError):  # EIO: the pty's other side is gone
            pass
        finally:
            transport.close()
            shell.output_done.set()

    async def pump_input(self, shell: Shell, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> tuple[int | None, str]:
        """websocket -> pty until the browser closes (its close code) or the shell ends (None)."""
        while True:
            read = asyncio.create_task(ws.read_message(reader, writer, MAX_INPUT_FRAME))
            ended = asyncio.create_task(shell.output_done.wait())
            finished, _ = await asyncio.wait({read, ended}, return_when=asyncio.FIRST_COMPLETED)
            if ended in finished:
                read.cancel()
                return None, ""
            ended.cancel()
            try:
                opcode, payload = read.result()
            except ws.ProtocolError as exc:
                log.warning("closing a terminal websocket: %s", exc)
                return exc.code, str(exc)[:100]
            except (asyncio.IncompleteReadError, ConnectionError):
                return ws.CLOSE_GOING_AWAY, "connection lost"
            if opcode == ws.CLOSE:
                return ws.CLOSE_NORMAL, "closed by the browser"
            await self.apply(shell, opcode, payload)

    async def apply(self, shell: Shell, opcode: int, payload: bytes) -> None:
        if opcode == ws.BINARY:
            await shell.write(payload)
            return
        message = control_message(payload.decode("utf-8", "replace"))
        if message is None:
            log.info("ignoring a text frame that is not a control message (%d bytes)", len(payload))
        elif message[0] == "resize":
            shell.resize(*message[1])
        else:
            await shell.write(message[1])

    async def _ended(self, shell: Shell, output: asyncio.Task) -> int | None:
        """Wait for the shell's output to end (a hung-up one gets its grace and a second, then is left
        behind: something it started may keep the pty open), reap it, forget it."""
        try:
            await asyncio.wait_for(asyncio.shield(output), None if not shell.hung_up else HANGUP_GRACE_S + 1)
        except asyncio.TimeoutError:
            output.cancel()
        status = await shell.exit_status()
        os.close(shell.fd)
        self.shells.discard(shell)
        if not shell.hung_up and not self.shells:
            self.done.set()  # the user ended the last shell: the session's job is over
        return status

    def stop(self) -> None:
        for shell in list(self.shells):
            shell.hang_up()
        self.done.set()


async def serve(config: Config, environ: Mapping[str, str]) -> int:
    """Listen until the last shell ends by itself (exit 0) or SIGTERM/SIGINT (exit 0 after hanging up)."""
    server = TerminalServer(config, environ)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, server.stop)
    listener = await asyncio.start_server(server.handle, config.host, config.port, limit=ws.MAX_HEAD)
    log.info("terminal session listening on %s:%d under %s", config.host, config.port, config.base_url)
    async with listener:
        await server.done.wait()
    await asyncio.sleep(0.1)  # let the close frames of open websockets leave
    return 0


def main(environ: Mapping[str, str] | None = None) -> int:
    environ = os.environ if environ is None else environ
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    return asyncio.run(serve(config_from_env(environ), environ))


async def _drain(writer: asyncio.StreamWriter) -> None:
    try:
        await writer.drain()
    except ConnectionError:
        pass


if __name__ == "__main__":
    sys.exit(main())
