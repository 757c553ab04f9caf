// The session panel of a job page: polls the session's status and shows its phase, the Open button,
// its idle time and time left. Stops polling once the session has ended.
(function () {
  "use strict";
  var panel = document.getElementById("session");
  if (!panel) { return; }
  var url = panel.getAttribute("data-status-url");
  function text(id, value) { document.getElementById(id).textContent = value; }
  function seconds(value) { return value === null || value === undefined ? "-" : Math.round(value) + " s"; }
  function detail(s) {
    if (s.phase === "queued") {
      return "place " + s.queue_position + " in the TE queue" + (s.pending_reason ? ": " + s.pending_reason : "");
    }
    if (s.phase === "ended") { return s.ended_reason; }
    if (s.phase === "starting") { return "waiting for the session's server to answer"; }
    return "";
  }
  function show(s) {
    text("session-phase", s.phase);
    text("session-detail", detail(s));
    text("session-idle", seconds(s.idle_seconds));
    text("session-left", seconds(s.time_left_seconds));
    var open = document.getElementById("session-open");
    if (s.phase === "ready" && s.url) { open.href = s.url; open.hidden = false; } else { open.hidden = true; }
  }
  function poll() {
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (s) {
        if (s) { show(s); }
        if (!s || s.phase !== "ended") { setTimeout(poll, s && s.phase === "ready" ? 5000 : 500); }
      })
      .catch(function () { setTimeout(poll, 2000); });
  }
  poll();
})();
