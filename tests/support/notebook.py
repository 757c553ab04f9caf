"""Running a notebook cell from a browser page through the portal's session proxy.

``RUN_CELL`` is the JavaScript a Playwright page evaluates: it starts a
kernel through JupyterLab's REST API under the session's URL prefix, sends one
``execute_request`` over the kernel's websocket (Jupyter's JSON protocol) and
resolves with what the cell printed, once the kernel is idle again. Every
request goes through the portal, with the browser's own cookies; the session's
secret is added by the proxy. The browser tests and the start-up benchmark
use it.
"""

from __future__ import annotations

RUN_CELL = """
async ([base, code]) => {
  const kernel = await fetch(base + "api/kernels", {method: "POST", headers: {"Content-Type": "application/json"},
                                                    body: JSON.stringify({name: "python3"})});
  if (!kernel.ok) { return {error: "starting a kernel: " + kernel.status + " " + await kernel.text()}; }
  const id = (await kernel.json()).id;
  const scheme = location.protocol === "https:" ? "wss://" : "ws://";
  const ws = new WebSocket(scheme + location.host + base + "api/kernels/" + id + "/channels?session_id=browser");
  return await new Promise((resolve) => {
    let out = "";
    const msgId = "cell-" + Math.random().toString(16).slice(2);
    ws.onopen = () => ws.send(JSON.stringify({
      header: {msg_id: msgId, username: "", session: "browser", msg_type: "execute_request", version: "5.3",
               date: new Date().toISOString()},
      parent_header: {}, metadata: {}, channel: "shell", buffers: [],
      content: {code: code, silent: false, store_history: false, user_expressions: {}, allow_stdin: false,
                stop_on_error: true}}));
    ws.onmessage = (event) => {
      const msg = JSON.parse(event.data);
      if (!msg.parent_header || msg.parent_header.msg_id !== msgId) { return; }
      if (msg.msg_type === "stream") { out += msg.content.text; }
      if (msg.msg_type === "error") { out += "ERROR " + msg.content.ename + ": " + msg.content.evalue; }
      if (msg.msg_type === "status" && msg.content.execution_state === "idle") { ws.close(); resolve({out: out, kernel: id}); }
    };
    ws.onerror = () => resolve({error: "the kernel's websocket failed"});
  });
}
"""

CELL = ("import os\n"
        "print('gpus=' + os.environ['CUDA_VISIBLE_DEVICES'])\n"
        "open(os.path.join(os.environ['CHECKPOINT_DIR'], 'from-notebook.txt'), 'w').write('written by a cell')\n"
        "print('cwd=' + os.getcwd())\n")
