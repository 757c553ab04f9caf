/* A terminal session's page: xterm.js on a websocket to /sessions/<id>/pty (through the portal's proxy).
 * Keystrokes go out as binary frames, the terminal's size as {"resize": [cols, rows]}; output comes back
 * as binary frames. The socket is not reopened when it closes: the shell it had is gone (a new
 * connection would start a new shell), so the page says why and offers a reload. */
"use strict";

(() => {
  const box = document.getElementById("terminal");
  const status = document.getElementById("terminal-status");
  const term = new Terminal({ cursorBlink: true, scrollback: 5000, convertEol: false });
  const fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(box);
  fit.fit();

  const scheme = location.protocol === "https:" ? "wss://" : "ws://";
  const socket = new WebSocket(scheme + location.host + box.dataset.ptyPath);
  socket.binaryType = "arraybuffer";
  const encoder = new TextEncoder();

  function setStatus(state, text) {
    status.dataset.state = state;
    status.textContent = text;
  }

  function sendSize() {
    if (socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ resize: [term.cols, term.rows] }));
  }

  socket.onopen = () => { setStatus("live", "connected"); sendSize(); term.focus(); };
  socket.onmessage = (event) => {
    if (event.data instanceof ArrayBuffer) term.write(new Uint8Array(event.data));
  };
  socket.onclose = (event) => {
    const why = event.reason || (event.code === 1006 ? "the connection was lost" : "closed");
    setStatus("closed", "disconnected: " + why + " (reload the page for a new shell)");
    term.options.disableStdin = true;
  };
  term.onData((data) => { if (socket.readyState === WebSocket.OPEN) socket.send(encoder.encode(data)); });
  term.onResize(sendSize);
  window.addEventListener("resize", () => fit.fit());
})();
