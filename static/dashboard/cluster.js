/* The cluster page: GPU grid, queue by class and utilization, redrawn from each pushed state. */
"use strict";

(() => {
  const { el, duration, dateTime } = Live;
  const STATUS_TEXT = { free: "free", TE: "TE job", BE: "BE job", preempting: "preempting", lost: "node lost", down: "node down",
                        unhealthy: "out of service" };
  let skewMs = 0; // client clock minus server clock, so waiting times tick without drifting
  const skewSamples = [];

  /* A state may have been read a few seconds before this page got it (one read serves every page of the
   * portal for up to 10 s): the freshest of the last few states tells the clocks' difference best. */
  function noteSkew(generatedAt) {
    skewSamples.push(Date.now() - Date.parse(generatedAt));
    if (skewSamples.length > 10) skewSamples.shift();
    skewMs = Math.min(...skewSamples);
  }

  function secondsSince(iso) {
    return (Date.now() - skewMs - Date.parse(iso)) / 1000;
  }

  function jobText(job) {
    let text = "job " + job.id + " " + job.name + " (" + job.owner + ", " + job.job_class + ", " + job.state;
    if (job.started_at) text += " for " + duration(secondsSince(job.started_at));
    return text + ")";
  }

  function gpuTitle(node, gpu) {
    const model = gpu.model || node.model; // the node's when its GPUs share one
    const head = node.name + " GPU " + gpu.index + (model ? " · " + model : "")
      + (gpu.healthy === false ? " · UNHEALTHY: " + gpu.unhealthy_reason : "");
    return gpu.job ? head + ": " + jobText(gpu.job) : head + ": " + STATUS_TEXT[gpu.status];
  }

  function showDetail(text) {
    document.getElementById("gpu-detail").textContent = text;
  }

  /* The grid is updated in place, cell by cell, so that a push never takes the focus or the
   * pointer away from the GPU a person is looking at. */
  function renderGrid(nodes) {
    const grid = document.getElementById("grid");
    if (!nodes.length) {
      grid.replaceChildren(el("p", { class: "empty" }, "No node has registered yet. Start a node agent to see its GPUs here."));
      return;
    }
    const existing = new Map([...grid.querySelectorAll(":scope > section.node")].map((s) => [s.dataset.node, s]));
    let previous = null;
    for (const node of nodes) {
      let section = existing.get(node.name);
      existing.delete(node.name);
      if (!section) section = el("section", { dataset: { node: node.name } }, el("header"), el("div", { class: "gpus" }));
      section.className = "node node-" + node.state.toLowerCase();
      const headerKey = [node.state, node.free, node.total, node.agent_outdated, node.protocol_version].join("\n");
      if (section.headerKey !== headerKey) section.querySelector("header").replaceChildren(
        el("strong", {}, el("a", { href: "/cluster/nodes/" + encodeURIComponent(node.name) + "/", class: "node-link" }, node.name)), " ",
        el("span", { class: "badge badge-" + node.state.toLowerCase() }, node.state), " ",
        el("span", { class: "muted" }, node.free + "/" + node.total + " free"),
        ...(node.agent_outdated ? [" ", el("span", { class: "badge badge-old-agent",
          title: "its agent speaks an older message protocol: upgrade it" },
          "old agent (protocol " + node.protocol_version + ")")] : []));
      section.headerKey = headerKey;
      // A node and the jobs on it that are the very objects of the last push (changes leave them so)
      // show what they showed: at 1,000 nodes a push walks only the few nodes that changed.
      const holders = node.gpus.map((gpu) => gpu.job);
      if (section.shown !== node || holders.some((job, i) => job !== section.holders[i])) {
        updateCells(section.querySelector(".gpus"), node);
        section.shown = node;
        section.holders = holders;
      }
      if (previous ? previous.nextElementSibling !== section : grid.firstElementChild !== section) {
        if (previous) previous.after(section); else grid.prepend(section);
      }
      previous = section;
    }
    for (const stale of existing.values()) stale.remove();
    for (const other of grid.querySelectorAll(":scope > :not(section.node)")) other.remove();
  }

  // The GPU cell under the pointer or with the focus: its detail line follows each push.
  let pointed = null;

  function describe(cell) {
    const title = gpuTitle(cell.gpuNode, cell.gpu);
    cell.title = title;
    cell.setAttribute("aria-label", title);
    return title;
  }

  function updateCells(box, node) {
    const cells = [...box.children];
    node.gpus.forEach((gpu, i) => {
      const tag = gpu.job && gpu.job.url ? "A" : "SPAN";
      let cell = cells[i];
      if (!cell || cell.tagName !== tag) {
        const fresh = el(tag.toLowerCase(), { tabindex: "0" });
        for (const type of ["mouseenter", "focus", "click"]) {
          fresh.addEventListener(type, () => { pointed = fresh; showDetail(describe(fresh)); });
        }
        for (const type of ["mouseleave", "blur"]) fresh.addEventListener(type, () => { if (pointed === fresh) pointed = null; });
        if (cell) { if (pointed === cell) pointed = fresh; cell.replaceWith(fresh); } else box.append(fresh);
        cell = fresh;
      }
      cell.gpu = gpu;
      cell.gpuNode = node;
      const className = "gpu gpu-" + gpu.status + (gpu.job && gpu.job.mine ? " mine" : "")
        + (gpu.healthy === false ? " unhealthy" : "");
      // A push carries every GPU again; a cell is rewritten only when what it shows changed (at 1,000
      // nodes rewriting all 8,000 cells took most of the page's time per push). Its title, which
      // counts the job's running time, is written then and again when it is pointed at.
      const key = [className, node.name, gpu.index, gpu.model || node.model, gpu.unhealthy_reason, gpu.job ? gpu.job.id : "",
                   gpu.job ? gpu.job.state + gpu.job.name + gpu.job.owner : "", tag === "A" ? gpu.job.url : ""].join("\n");
      if (cell.gpuKey === key) return;
      cell.gpuKey = key;
      cell.className = className;
      describe(cell);
      cell.textContent = String(gpu.index);
      Object.assign(cell.dataset, { status: gpu.status, node: node.name, index: String(gpu.index),
                                    healthy: gpu.healthy === false ? "false" : "true",
                                    jobId: gpu.job ? String(gpu.job.id) : "" });
      if (tag === "A") cell.href = gpu.job.url;
    });
    for (const extra of cells.slice(node.gpus.length)) { if (pointed === extra) pointed = null; extra.remove(); }
  }

  function renderTotals(totals, queue) {
    const items = [
      ["GPUs", totals.gpus], ["allocated", totals.allocated], ["TE", totals.TE || 0], ["BE", totals.BE || 0],
      ["free", totals.free], ["preempting", totals.preempting || 0], ["lost", totals.lost || 0],
      ["TE waiting", queue.TE.count], ["BE waiting", queue.BE.count],
    ];
    document.getElementById("totals").replaceChildren(...items.map(([label, value]) =>
      el("div", { class: "stat" }, el("span", { class: "value" }, String(value)), el("span", { class: "label" }, label))));
  }

  function waitingCell(job) {
    return el("td", { class: "waiting", dataset: { submitted: job.submitted_at } }, duration(secondsSince(job.submitted_at)));
  }

  function renderQueue(cls, queue) {
    document.getElementById("queue-count-" + cls).textContent = String(queue.count);
    const reasons = Object.entries(queue.by_reason).map(([reason, n]) => reason + ": " + n).join(", ");
    document.getElementById("queue-reasons-" + cls).textContent = reasons || "empty";
    const body = document.getElementById("queue-" + cls);
    if (!queue.jobs.length) {
      body.replaceChildren(el("tr", {}, el("td", { colspan: "8", class: "empty" }, "No " + cls + " job waiting.")));
      return;
    }
    body.replaceChildren(...queue.jobs.map((job) => el("tr", { dataset: { jobId: String(job.id) }, class: job.mine ? "mine" : null },
      el("td", {}, String(job.position)),
      el("td", {}, job.url ? el("a", { href: job.url }, "#" + job.id + " " + job.name) : "#" + job.id + " " + job.name),
      el("td", {}, job.owner),
      el("td", {}, String(job.num_gpus)),
      waitingCell(job),
      el("td", {}, job.reason || "-"),
      el("td", {}, job.forecast_start ? dateTime(job.forecast_start) : "-"),
      el("td", { class: "message" }, job.message || ""))));
    if (queue.count > queue.jobs.length) {
      body.append(el("tr", {}, el("td", { colspan: "8", class: "empty" }, (queue.count - queue.jobs.length) + " more not listed.")));
    }
  }

  function tickWaiting() {
    for (const cell of document.querySelectorAll("td.waiting")) cell.textContent = duration(secondsSince(cell.dataset.submitted));
  }

  /* The chart is redrawn at most every UTIL_REDRAW_MS, with the latest figures: at 1,000 nodes a push
   * comes every second, and Plotly's redraw was the larger part of the page's work for each. */
  const UTIL_REDRAW_MS = 5000;
  let utilLatest = null;
  let utilDrawnAt = 0;
  let utilTimer = null;

  function scheduleUtilization(util) {
    utilLatest = util;
    if (utilTimer) return;
    const wait = Math.max(0, utilDrawnAt + UTIL_REDRAW_MS - Date.now());
    utilTimer = setTimeout(() => { utilTimer = null; utilDrawnAt = Date.now(); renderUtilization(utilLatest); }, wait);
  }

  function renderUtilization(util) {
    const traces = [
      { x: util.t, y: util.TE, name: "TE", stackgroup: "gpus", line: { color: "#2d5bd3" }, hovertemplate: "%{y:.0%}" },
      { x: util.t, y: util.BE, name: "BE", stackgroup: "gpus", line: { color: "#e08a00" }, hovertemplate: "%{y:.0%}" },
    ];
    const layout = {
      margin: { t: 10, r: 10, b: 40, l: 50 }, height: 260, legend: { orientation: "h", y: 1.12 },
      yaxis: { tickformat: ".0%", range: [0, 1.05], title: { text: "of " + util.capacity + " GPUs" } },
      xaxis: { type: "date" }, template: "plotly_white",
    };
    Plotly.react("util-chart", traces, layout, Live.PLOT_CONFIG);
  }

  /* A GPU names the job holding it (job_id); the state lists each such job once (jobs), however many
   * GPUs it holds. */
  function withJobs(nodes, jobs) {
    for (const node of nodes) {
      for (const gpu of node.gpus) gpu.job = gpu.job_id == null ? null : jobs[String(gpu.job_id)] || null;
    }
    return nodes;
  }

  function render(state) {
    noteSkew(state.generated_at);
    renderTotals(state.totals, state.queue);
    renderGrid(withJobs(state.nodes, state.jobs || {}));
    if (pointed && pointed.isConnected) showDetail(describe(pointed));
    renderQueue("TE", state.queue.TE);
    renderQueue("BE", state.queue.BE);
    scheduleUtilization(state.utilization);
    document.getElementById("updated").textContent = Live.time(state.generated_at);
  }

  /* The page asks for changes: after the whole state, each message carries only what changed since the
   * last (portal/dashboard/cluster_delta.py, whose apply_changes this mirrors). A reconnection starts
   * again from a whole state. */
  function applyChanges(sent, changes) {
    const state = Object.assign({}, sent);
    for (const key of changes.unset || []) delete state[key];
    Object.assign(state, changes.set);
    const byName = new Map(sent.nodes.map((node) => [node.name, node]));
    for (const node of changes.nodes) byName.set(node.name, node);
    state.nodes = (changes.node_order || sent.nodes.map((node) => node.name)).map((name) => byName.get(name));
    state.jobs = Object.assign({}, sent.jobs, changes.jobs);
    for (const key of changes.jobs_gone) delete state.jobs[key];
    return state;
  }

  let current = Live.readJson("initial-state");
  render(current);
  setInterval(tickWaiting, 5000);
  const socket = Live.connect("/ws/cluster/?changes=1", (message) => {
    if (message.type === "cluster") current = message.state;
    else if (message.type === "cluster-changes") current = applyChanges(current, message.changes);
    else return;
    render(current);
  }, document.getElementById("live-status"));
  // The utilization window slides even when nothing changes: ask for a fresh state every minute.
  setInterval(() => socket.send({ type: "refresh" }), 60000);
})();
