/* The job page, live: state, reason, timeline, attempts with the preemption ledger, the log as it is
 * written (every attempt's log can be opened), and cancel without leaving the page.
 * It updates the server-rendered page in place (templates/portal/job_detail.html). */
"use strict";

(() => {
  const { el, time, dateTime } = Live;
  const config = document.currentScript.dataset; // jobId, cancelPageUrl, cancelApiUrl, logsUrl
  // attempt followed live, attempt shown, lines shown, whether the job has ended
  // and the attempts that have ended (their empty log means the job printed nothing, not "not yet")
  const view = { following: null, shown: null, lines: 0, terminal: false, ended: new Set(), latest: null };

  function setBadge(name) {
    const badge = document.getElementById("job-state");
    badge.textContent = name;
    badge.className = "state state-" + name.toLowerCase();
    return badge;
  }

  function setState(state) {
    const line = setBadge(state.state).parentElement;
    for (const old of line.querySelectorAll(".reason")) old.remove();
    if (state.pending_reason) {
      line.append(el("span", { class: "reason", id: "job-reason" },
        state.pending_reason + (state.pending_message ? ": " + state.pending_message : "")));
    }
    setFact("Attempts", state.attempt_count + " (" + state.preemption_count + " preempted" +
      (state.reconfiguration_count ? ", " + state.reconfiguration_count + " reconfigured" : "") + ")");
    setFact("Forecast start", forecastText(state));
    setFact("First started", dateTime(state.first_started_at));
    setFact("Ended", dateTime(state.ended_at));
    setFact("Exit code", state.exit_code === null ? "-" : String(state.exit_code));
    const cancel = cancelForm();
    if (cancel && !state.can_cancel) cancel.hidden = true;
    const note = document.getElementById("cancel-note");
    if (note && state.terminal) note.remove();
    view.terminal = Boolean(state.terminal);
  }

  // The pending job's forecast start and queue position (recomputed in the background).
  function forecastText(state) {
    const f = state.forecast;
    if (!f) return state.state === "PENDING" ? "not computed yet" : "-";
    return (f.start ? dateTime(f.start) : "not within 14 days") + "; position " + f.position +
      " in the " + state.job_class + " queue (as of " + time(f.computed_at) + ")";
  }

  function setFact(label, text) {
    for (const dt of document.querySelectorAll("dl.facts dt")) {
      if (dt.textContent.trim() === label && dt.nextElementSibling) dt.nextElementSibling.textContent = text;
    }
  }

  function renderTimeline(events) {
    const list = document.getElementById("timeline");
    if (!list) return;
    list.replaceChildren(...events.map((e) => el("li", {},
      el("time", { datetime: e.at }, dateTime(e.at)), " ",
      el("span", { class: "state state-" + e.state.toLowerCase() }, e.state), " ",
      e.reason ? el("span", { class: "reason" }, e.reason) : null, " ", e.message)));
  }

  function yesNo(value) { return value === null ? "-" : value ? "yes" : "no"; }

  function renderAttempts(attempts) {
    const body = document.querySelector("table.attempts tbody");
    if (!body) return;
    if (!attempts.length) {
      body.replaceChildren(el("tr", {}, el("td", { colspan: "11", class: "empty" }, "Not started yet.")));
      return;
    }
    body.replaceChildren(...attempts.map((a) => el("tr", { dataset: { attempt: String(a.number) } },
      el("td", {}, String(a.number)),
      el("td", {}, Object.entries(a.allocation).map(([node, gpus]) => node + ": " + gpus.join(",")).join("; ")),
      el("td", {}, time(a.started_at)), el("td", {}, time(a.ended_at)), el("td", {}, a.state),
      el("td", {}, a.exit_code === null ? "-" : String(a.exit_code)),
      el("td", {}, a.signal === null ? "-" : String(a.signal)),
      el("td", {}, time(a.notice_at)), el("td", {}, time(a.vacated_at)), el("td", {}, yesNo(a.checkpointed)),
      el("td", {}, a.lost_gpu_seconds === null ? "-" : Number(a.lost_gpu_seconds).toFixed(1)))));
    view.ended = new Set(attempts.filter((a) => a.ended_at).map((a) => a.number));
    view.latest = attempts[attempts.length - 1].number;
    const pre = document.getElementById("log");
    if (pre && EMPTY_LOG_TEXTS.includes(pre.textContent.trim())) pre.textContent = emptyLogText();
    renderAttemptTabs(attempts.map((a) => a.number));
    renderPlans(attempts);
  }

  /* The plan history of a job with a model or plan (the table exists only for those). */
  function renderPlans(attempts) {
    const body = document.querySelector("#plan-history tbody");
    if (!body || !attempts.length) return;
    body.replaceChildren(...attempts.map((a) => el("tr", {},
      el("td", {}, String(a.number)), el("td", {}, a.plan || "-"), el("td", {}, String(a.gpu_count)),
      el("td", {}, String(a.grad_accum_steps)), el("td", {}, time(a.started_at)), el("td", {}, time(a.ended_at)),
      el("td", {}, a.notice_reason === "reconfigure"
        ? "reconfigured" + (a.state !== "RECONFIGURED" ? " (" + a.state + ")" : "") : a.state))));
  }

  /* The log section: created when the first attempt starts if the page was rendered before. */
  function logArea() {
    let pre = document.getElementById("log");
    if (!pre) {
      const anchor = document.querySelector("table.attempts") || document.getElementById("timeline");
      const host = anchor.closest(".scroll") || anchor;
      const heading = el("h2", { id: "log-heading" }, "Log");
      pre = el("pre", { class: "log", id: "log" });
      host.after(heading, pre);
    } else if (!document.getElementById("log-heading")) {
      pre.previousElementSibling.id = "log-heading";
    }
    if (!document.getElementById("log-tabs")) {
      pre.before(el("div", { id: "log-tabs", class: "tabs", role: "tablist" }));
    }
    return pre;
  }

  function renderAttemptTabs(numbers) {
    if (!numbers.length) return;
    logArea();
    const tabs = document.getElementById("log-tabs");
    tabs.replaceChildren(...numbers.map((n) => {
      const button = el("button", { type: "button", class: "small " + (n === view.shown ? "" : "secondary"), role: "tab",
        "aria-selected": n === view.shown ? "true" : "false", dataset: { attempt: String(n) } },
        "attempt " + n + (n === view.following && !view.terminal ? " (live)" : ""));
      button.addEventListener("click", () => showAttempt(n));
      return button;
    }));
  }

  function setHeading(n) {
    logArea(); // a page opened before the first attempt gets its log section with the first lines
    document.getElementById("log-heading").textContent = "Log of attempt " + n;
  }

  function writeLog(lines, reset, truncated) {
    const pre = logArea();
    const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    if (reset || !view.lines) { pre.textContent = ""; } // also drops the empty-log placeholder
    if (reset) view.lines = 0;
    if (reset && truncated) pre.append(el("span", { class: "muted" }, "… earlier lines left out; the API has them all\n"));
    if (lines.length) {
      pre.append(document.createTextNode(lines.join("\n") + "\n"));
      view.lines += lines.length;
    }
    if (!view.lines && !truncated) pre.textContent = emptyLogText();
    if (atBottom || reset) pre.scrollTop = pre.scrollHeight; // follow the tail unless the reader scrolled up
  }

  const EMPTY_LOG_TEXTS = ["(no output yet)", "(the job printed nothing)"];

  function emptyLogText() {
    const shown = view.shown === null ? view.latest : view.shown;
    return view.ended.has(shown) ? "(the job printed nothing)" : "(no output yet)";
  }

  /* A finished attempt's log comes from the REST API; the live one streams over the socket and is
   * kept here, so switching back to it needs no request. */
  const live = { attempt: null, lines: [], truncated: false };
  /* Lines of a log the page holds: a job that prints without end must not fill the browser's memory
   * (the server sends the last 2,000 on connecting; the API has every line). */
  const LOG_KEPT_LINES = 2000;

  async function showAttempt(n) {
    view.shown = n;
    if (n === live.attempt) {
      setHeading(n);
      writeLog(live.lines, true, live.truncated);
    } else {
      setHeading(n);
      const response = await fetch(config.logsUrl + "?attempt=" + n + "&tail=" + LOG_KEPT_LINES,
                                   { credentials: "same-origin" });
      const body = response.ok ? await response.json() : { lines: ["(could not load the log: HTTP " + response.status + ")"] };
      if (view.shown === n) writeLog(body.lines, true, body.offset > 0);
    }
    refreshTabs();
  }

  function refreshTabs() {
    renderAttemptTabs([...document.querySelectorAll("#log-tabs button")].map((b) => Number(b.dataset.attempt)));
  }

  function onLog(message) {
    if (message.reset) {
      // Follow a new attempt unless the reader chose to look at an older one.
      if (view.shown === null || view.shown === live.attempt) view.shown = message.attempt;
      live.attempt = message.attempt;
      live.lines = [];
      live.truncated = message.truncated;
    }
    live.lines.push(...message.lines);
    view.following = live.attempt;
    const cut = live.lines.length > 2 * LOG_KEPT_LINES;
    if (cut) {
      live.lines = live.lines.slice(-LOG_KEPT_LINES);
      live.truncated = true;
    }
    if (view.shown === live.attempt) {
      setHeading(message.attempt);
      if (cut) writeLog(live.lines, true, true); // written again from the kept lines
      else writeLog(message.lines, message.reset, message.truncated);
    }
    refreshTabs();
  }

  function onMessage(message) {
    if (message.type === "job") {
      setState(message.state);
      renderTimeline(message.state.events);
      renderAttempts(message.state.attempts);
    } else if (message.type === "log") {
      onLog(message);
    } else if (message.type === "progress") {
      JobProgress.render(message.progress);
    }
  }

  function cancelForm() {
    return document.querySelector('form[action="' + config.cancelPageUrl + '"]');
  }

  /* Cancel through the API so the page stays put; the new state arrives over the socket. */
  const form = cancelForm();
  if (form) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      if (!confirm("Cancel this job?")) return;
      const button = form.querySelector("button");
      button.disabled = true;
      const token = form.querySelector("input[name=csrfmiddlewaretoken]").value;
      const response = await fetch(config.cancelApiUrl, {
        method: "POST", credentials: "same-origin", headers: { "X-CSRFToken": token, "Accept": "application/json" },
      });
      const note = document.getElementById("cancel-note") || el("span", { id: "cancel-note", class: "muted" });
      form.after(note);
      if (response.ok) {
        const job = await response.json();
        note.textContent = " Cancel requested: " + job.state + ".";
        setBadge(job.state); // the socket brings the rest of the new state
      } else {
        const body = await response.json().catch(() => ({}));
        note.textContent = " " + (body.detail || "Cancel failed: HTTP " + response.status);
        button.disabled = false;
      }
    });
  }

  // The connection indicator sits in the heading.
  const status = el("span", { id: "live-status", class: "live-status", dataset: { state: "connecting" } }, "connecting…");
  document.querySelector("main h1").append(" ", status);
  Live.connect("/ws/jobs/" + config.jobId + "/", onMessage, status);
})();
