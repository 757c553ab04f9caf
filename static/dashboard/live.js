/* Shared helpers of the live pages: a WebSocket that reconnects with backoff, DOM and format helpers.
 * No framework; every text from the server is set with textContent (never innerHTML). */
"use strict";

const Live = (() => {
  const NO_RETRY = new Set([4401, 4404]); // not logged in / not allowed: reconnecting cannot help
  const MIN_DELAY_MS = 500;
  const MAX_DELAY_MS = 15000;

  /* connect(path, onMessage, statusEl): keeps a socket to `path` (a string, or a function giving
   * the path at each (re)connection) open for the page's lifetime.
   * After a drop it waits 0.5 s, 1 s, 2 s, ... up to 15 s (with jitter) and reconnects; the
   * server then sends the full state again, so the page never needs a reload. */
  function connect(path, onMessage, statusEl) {
    let delay = MIN_DELAY_MS;
    let socket = null;
    let timer = null;
    const handle = { send: (obj) => socket && socket.readyState === 1 && socket.send(JSON.stringify(obj)), socket: () => socket };

    function setStatus(kind, text) {
      if (!statusEl) return;
      statusEl.dataset.state = kind;
      statusEl.textContent = text;
    }

    function open() {
      const scheme = location.protocol === "https:" ? "wss://" : "ws://";
      socket = new WebSocket(scheme + location.host + (typeof path === "function" ? path() : path));
      setStatus("connecting", "connecting…");
      socket.onopen = () => { delay = MIN_DELAY_MS; setStatus("live", "live"); };
      let parts = null; // a long message arriving in parts: {id, texts}
      socket.onmessage = (event) => {
        let data;
        try { data = JSON.parse(event.data); } catch (e) { return; }
        if (data.type === "part") { // the server splits a long message; its parts come in order
          if (!parts || parts.id !== data.id) parts = { id: data.id, texts: new Array(data.count), got: 0 };
          if (parts.texts[data.index] === undefined) { parts.texts[data.index] = data.text; parts.got += 1; }
          if (parts.got < data.count) return;
          const whole = parts.texts.join("");
          parts = null;
          try { data = JSON.parse(whole); } catch (e) { return; }
        }
        onMessage(data, handle);
      };
      socket.onclose = (event) => {
        if (NO_RETRY.has(event.code)) {
          setStatus("closed", event.code === 4401 ? "signed out: log in again" : "not available");
          return;
        }
        const wait = Math.round(delay * (0.8 + Math.random() * 0.4));
        setStatus("reconnecting", "reconnecting in " + Math.ceil(wait / 1000) + " s");
        timer = setTimeout(open, wait);
        delay = Math.min(delay * 2, MAX_DELAY_MS);
      };
    }

    // Reconnect at once when the tab comes back or the network returns.
    const nudge = () => {
      if (socket && socket.readyState === 3 && timer) { clearTimeout(timer); timer = null; delay = MIN_DELAY_MS; open(); }
    };
    window.addEventListener("online", nudge);
    document.addEventListener("visibilitychange", () => { if (!document.hidden) nudge(); });
    open();
    return handle;
  }

  /* el("td", {class: "x", title: "..."}, child, "text", ...) */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "dataset") Object.assign(node.dataset, value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function duration(seconds) {
    if (seconds === null || seconds === undefined) return "-";
    const s = Math.max(0, seconds);
    if (s < 1) return s.toFixed(2) + " s";
    if (s < 120) return s.toFixed(s < 10 ? 1 : 0) + " s";
    if (s < 7200) return (s / 60).toFixed(0) + " min";
    if (s < 172800) return (s / 3600).toFixed(1) + " h";
    return (s / 86400).toFixed(1) + " d";
  }

  function number(value, digits) {
    if (value === null || value === undefined) return "-";
    return Number(value).toFixed(digits === undefined ? 2 : digits);
  }

  /* Times are shown in UTC, like the server-rendered parts of the pages. */
  function time(iso) {
    return iso ? new Date(iso).toISOString().slice(11, 19) : "-";
  }

  function dateTime(iso) {
    return iso ? new Date(iso).toISOString().slice(0, 19).replace("T", " ") : "-";
  }

  function readJson(id) {
    const node = document.getElementById(id);
    return node ? JSON.parse(node.textContent) : null;
  }

  const PLOT_CONFIG = { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["select2d", "lasso2d"] };

  return { connect, el, duration, number, time, dateTime, readJson, PLOT_CONFIG };
})();
