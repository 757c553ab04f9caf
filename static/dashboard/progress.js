/* The job page's progress section: bar, step, ETA, latest metrics and one live Plotly chart per metric.
 * Data: jobprogress.selectors.job_progress, first from the page (#initial-progress), then pushed over
 * the job socket ({"type": "progress"}, see job.js). plotly.js is loaded only once a job reports metrics. */
"use strict";

const JobProgress = (() => {
  const { el, duration } = Live;
  const plotlyUrl = document.currentScript.dataset.plotlyUrl;
  let plotly = null; // a promise, once requested
  const drawn = new Set(); // metric charts already created

  function loadPlotly() {
    if (window.Plotly) return Promise.resolve(window.Plotly);
    if (!plotly) {
      plotly = new Promise((resolve, reject) => {
        const script = el("script", { src: plotlyUrl });
        script.onload = () => resolve(window.Plotly);
        script.onerror = reject;
        document.head.append(script);
      });
    }
    return plotly;
  }

  function stepText(p) {
    if (p.step === null) return "";
    if (p.total_steps === null) return "step " + p.step;
    return "step " + p.step + " of " + p.total_steps + " (" + (100 * p.fraction).toFixed(1) + " %)";
  }

  function etaText(p) {
    const parts = [];
    if (p.epoch !== null) parts.push("epoch " + Number(p.epoch).toLocaleString("en", { maximumFractionDigits: 3 }));
    if (p.steps_per_second !== null) parts.push(Number(p.steps_per_second).toPrecision(3) + " steps/s");
    if (p.eta_seconds === 0) parts.push("done");
    else if (p.eta_seconds !== null) parts.push("ETA " + duration(p.eta_seconds) + " (about " +
      new Date(Date.now() + 1000 * p.eta_seconds).toISOString().slice(11, 16) + " UTC)");
    if (p.checkpoint) parts.push("last checkpoint" + (p.checkpoint.step !== undefined ? " at step " + p.checkpoint.step : ""));
    return parts.join(" · ");
  }

  function renderMetrics(p) {
    const list = document.getElementById("progress-metrics");
    const names = Object.keys(p.metrics).sort();
    list.replaceChildren(...names.flatMap((name) => [el("dt", {}, name),
      el("dd", { dataset: { metric: name } }, Number(p.metrics[name]).toPrecision(5))]));
  }

  async function renderCharts(p) {
    const names = Object.keys(p.history.metrics).sort();
    if (!names.length) return;
    const Plotly = await loadPlotly();
    const host = document.getElementById("progress-charts");
    const x = p.history.step.some((s) => s !== null) ? p.history.step : p.history.t.map((t) => new Date(1000 * t));
    for (const name of names) {
      const id = "progress-chart-" + name.replace(/[^A-Za-z0-9_-]/g, "_");
      if (!document.getElementById(id)) host.append(el("div", { id, class: "progress-chart", dataset: { metric: name } }));
      const trace = { x, y: p.history.metrics[name], mode: "lines+markers", name, connectgaps: true };
      const layout = { title: { text: name, font: { size: 13 } }, height: 220, margin: { l: 50, r: 10, t: 30, b: 30 },
        xaxis: { title: { text: x === p.history.step ? "step" : "time" } } };
      if (drawn.has(id)) await Plotly.react(id, [trace], layout, Live.PLOT_CONFIG);
      else { drawn.add(id); await Plotly.newPlot(id, [trace], layout, Live.PLOT_CONFIG); }
    }
  }

  /* Charts are drawn one update at a time: reports arrive faster than plotly.js loads, and drawings
   * of one chart must not overlap (the asynchronous steps of one would find the chart's elements
   * replaced by the other). Of the updates that arrive during a drawing, only the latest is drawn next. */
  let nextCharts = null; // the progress to draw next, while a drawing is under way
  let charting = false;

  async function drawCharts(p) {
    nextCharts = p;
    if (charting) return;
    charting = true;
    try {
      while (nextCharts) {
        const latest = nextCharts;
        nextCharts = null;
        await renderCharts(latest);
      }
    } finally {
      charting = false;
    }
  }

  function render(p) {
    if (!p) return;
    document.getElementById("progress-section").hidden = false;
    const bar = document.getElementById("job-progress");
    if (p.fraction === null) bar.removeAttribute("value"); else bar.value = p.fraction;
    document.getElementById("progress-text").textContent = stepText(p);
    document.getElementById("progress-eta").textContent = etaText(p);
    renderMetrics(p);
    drawCharts(p).catch(() => { nextCharts = null; /* plotly.js failed to load: the numbers above still update */ });
  }

  render(Live.readJson("initial-progress"));
  return { render };
})();
