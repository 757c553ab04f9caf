/* A simulation run's page: progress bar while it runs (polling its status every second), then the
 * comparison table and charts. */
"use strict";

(() => {
  const { el, number, duration } = Live;
  const statusUrl = document.currentScript.dataset.statusUrl;
  const POLL_MS = 1000;

  function pct(value) { return value === null || value === undefined ? "-" : (100 * value).toFixed(1) + " %"; }
  function change(value) {
    if (value === null || value === undefined) return "";
    return (value > 0 ? "+" : "") + value.toFixed(1) + " %";
  }

  function renderProgress(status) {
    document.getElementById("progress-box").hidden = !status.active;
    document.getElementById("progress").value = status.fraction;
    const text = status.state === "QUEUED" ? "Waiting for a worker…"
      : status.progress_total ? status.progress_done + " / " + status.progress_total + " job runs (" + pct(status.fraction) + ")"
        + (status.current_policy ? ", now " + status.current_policy : "") : "Preparing the workload…";
    document.getElementById("progress-text").textContent = text;
  }

  function renderResults(status) {
    document.getElementById("summary-rows").replaceChildren(...status.summary.map((r) => el("tr", { class: r.baseline ? "baseline" : null },
      el("th", {}, r.policy + (r.baseline ? " (baseline)" : "")),
      el("td", {}, number(r.te_slowdown_p95)), el("td", { class: "change" }, change(r.te_p95_change_pct)),
      el("td", {}, number(r.be_slowdown_p50)), el("td", {}, number(r.be_slowdown_p95)),
      el("td", { class: "change" }, change(r.be_p95_change_pct)),
      el("td", {}, duration(r.te_wait_p95_s)), el("td", {}, duration(r.be_wait_p50_s)),
      el("td", {}, String(r.preemptions)), el("td", {}, number(r.lost_gpu_hours, 1)), el("td", {}, pct(r.gpu_utilization)))));
    const notes = document.getElementById("run-notes");
    notes.replaceChildren(...(status.notes || []).map((note) => el("li", {}, note)));
    notes.hidden = !notes.children.length;
    document.getElementById("table-text").textContent = status.table;
    document.getElementById("results").hidden = false; // before plotting: Plotly sizes to a visible box
    const layout = { ...status.figure.layout, autosize: true };
    delete layout.width;
    Plotly.newPlot("figure", status.figure.data, layout, Live.PLOT_CONFIG);
  }

  /* "Simulation N queued." was true when the page loaded; once the run has moved on it would
   * contradict the state badge beside it. */
  function dropQueuedNotice() {
    for (const item of document.querySelectorAll(".messages li.run-queued")) {
      const list = item.parentElement;
      item.remove();
      if (!list.children.length) list.remove();
    }
  }

  function render(status) {
    const badge = document.getElementById("run-state");
    badge.textContent = status.state;
    badge.className = "state state-" + status.state.toLowerCase();
    if (status.workload) document.getElementById("run-workload").textContent = status.workload;
    if (status.state !== "QUEUED") dropQueuedNotice();
    renderProgress(status);
    if (status.state === "FAILED") {
      document.getElementById("error-box").hidden = false;
      document.getElementById("run-error").textContent = status.error;
    }
    if (status.state === "SUCCEEDED") renderResults(status);
  }

  async function poll() {
    try {
      const response = await fetch(statusUrl, { credentials: "same-origin", headers: { Accept: "application/json" } });
      if (response.ok) {
        const status = await response.json();
        render(status);
        if (!status.active) return;
      }
    } catch (e) { /* network blip: try again */ }
    setTimeout(poll, POLL_MS);
  }

  const initial = Live.readJson("initial-status");
  render(initial);
  if (initial.active) setTimeout(poll, POLL_MS);
})();
