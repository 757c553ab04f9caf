/* The latency page: TE/BE wait and slowdown percentiles with their CDFs, and the preemption ledger. */
"use strict";

(() => {
  const { el, duration, number } = Live;
  const COLORS = { TE: "#2d5bd3", BE: "#e08a00" };

  function renderTable(state) {
    const rows = ["TE", "BE"].map((cls) => {
      const w = state.wait_s[cls], s = state.slowdown[cls], q = state.waiting[cls];
      return el("tr", { dataset: { cls } },
        el("th", {}, cls),
        el("td", {}, String(w.count)), el("td", {}, duration(w.p50)), el("td", {}, duration(w.p95)),
        el("td", {}, String(s.count)), el("td", {}, number(s.p50)), el("td", {}, number(s.p95)),
        el("td", {}, String(q.count)), el("td", {}, q.longest_s === null ? "-" : duration(q.longest_s)));
    });
    document.getElementById("latency-rows").replaceChildren(...rows);
  }

  function renderLedger(ledger) {
    const share = ledger.checkpointed_share === null ? "-" : (100 * ledger.checkpointed_share).toFixed(0) + " %";
    const items = [
      ["preemptions", String(ledger.preemptions)],
      ["per hour", number(ledger.per_hour)],
      ["GPU-hours lost", number(ledger.lost_gpu_hours)],
      ["checkpointed in time", share + (ledger.checkpoint_known ? " (" + ledger.checkpointed + "/" + ledger.checkpoint_known + ")" : "")],
      ["BE victims", String(ledger.victims_by_class.BE)],
      ["TE victims", String(ledger.victims_by_class.TE)],
    ];
    document.getElementById("ledger").replaceChildren(...items.map(([label, value]) =>
      el("div", { class: "stat" }, el("span", { class: "value" }, value), el("span", { class: "label" }, label))));
  }

  function renderCdf(target, stats, axisTitle, logX) {
    // A step function from 0 at the smallest value: F jumps by 1/n at each sample.
    const traces = ["TE", "BE"].filter((cls) => stats[cls].count > 0).map((cls) => ({
      x: [stats[cls].cdf.x[0], ...stats[cls].cdf.x], y: [0, ...stats[cls].cdf.y],
      name: cls + " (" + stats[cls].count + ")", mode: stats[cls].count <= 20 ? "lines+markers" : "lines",
      line: { shape: "hv", color: COLORS[cls] },
    }));
    const layout = {
      margin: { t: 10, r: 10, b: 45, l: 50 }, height: 280, legend: { orientation: "h", y: 1.12 },
      xaxis: { title: { text: axisTitle }, type: logX ? "log" : "linear" },
      yaxis: { title: { text: "fraction of jobs" }, range: [0, 1.02] }, template: "plotly_white",
      annotations: traces.length ? [] : [{ text: "no job in this window", showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5 }],
    };
    Plotly.react(target, traces, layout, Live.PLOT_CONFIG);
  }

  function render(state) {
    renderTable(state);
    renderLedger(state.ledger);
    renderCdf("wait-cdf", state.wait_s, "wait (s)", false);
    renderCdf("slowdown-cdf", state.slowdown, "slowdown", true);
    document.getElementById("updated").textContent = Live.time(state.generated_at);
    document.getElementById("window").value = String(state.window_s);
  }

  const select = document.getElementById("window");
  render(Live.readJson("initial-state"));
  const socket = Live.connect(() => "/ws/latency/?window=" + select.value,
    (message) => { if (message.type === "latency") render(message.state); },
    document.getElementById("live-status"));
  select.addEventListener("change", () => {
    const seconds = Number(select.value);
    socket.send({ window: seconds });
    const url = new URL(location.href);
    url.searchParams.set("window", String(seconds));
    history.replaceState(null, "", url); // a reconnect or a reload keeps the chosen window
  });
  // The window slides even when no job changes: recompute every minute.
  setInterval(() => socket.send({ window: Number(select.value) }), 60000);
  document.getElementById("window-form").addEventListener("submit", (e) => e.preventDefault());
})();
