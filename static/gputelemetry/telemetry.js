// GPU telemetry charts of the node page and the job page (Plotly, served from our own static files).
// A container with data-telemetry-url is filled with one chart per series and refreshed every
// data-refresh seconds; the node page draws one line per GPU, the job page one line per series.
(function () {
  "use strict";
  var SERIES = [
    ["util", "Utilisation (%)"], ["fb_used", "Memory used (MiB)"], ["temp", "Temperature (°C)"], ["power", "Power (W)"],
  ];

  function times(ts) { return ts.map(function (t) { return new Date(t * 1000); }); }

  function traces(data, name) {
    if (data.gpus) {
      return data.gpus.map(function (g) {
        return {x: times(g.series.t), y: g.series[name], name: "GPU " + g.index, mode: "lines"};
      });
    }
    var out = data.series ? [{x: times(data.series.t), y: data.series[name], name: name, mode: "lines"}] : [];
    if (name === "fb_used" && data.series) {
      out.push({x: times(data.series.t), y: data.series.proc_mem, name: "its processes", mode: "lines"});
    }
    return out;
  }

  function draw(box, data) {
    var empty = box.querySelector(".telemetry-empty");
    var any = data.gpus ? data.gpus.some(function (g) { return g.series.t.length; }) : !!data.series;
    if (empty) {
      if (empty.dataset.text === undefined) { empty.dataset.text = empty.textContent; }
      empty.textContent = data.unavailable
        ? "GPU telemetry cannot be read right now (its store does not answer); it comes back by itself."
        : empty.dataset.text;
      empty.hidden = any;
    }
    SERIES.forEach(function (pair) {
      var id = box.id + "-" + pair[0];
      var el = document.getElementById(id);
      // No frames before there is a point to draw: a job that never ran would show four empty boxes.
      if (!el && !any) { return; }
      if (!el) {
        el = document.createElement("div");
        el.id = id;
        el.className = "chart telemetry-chart";
        box.appendChild(el);
      }
      el.hidden = !any;
      if (!any || !window.Plotly) { return; }
      window.Plotly.react(el, traces(data, pair[0]), {
        title: {text: pair[1], font: {size: 13}}, height: 220, margin: {l: 50, r: 10, t: 30, b: 30},
        showlegend: !!data.gpus, xaxis: {type: "date"},
      }, {displayModeBar: false, responsive: true});
    });
  }

  // Plotly is loaded only when there is something to draw (the job page of a job without telemetry needs none).
  var plotlyWaiters = null;
  function withPlotly(url, then) {
    if (window.Plotly || !url) { then(); return; }
    if (plotlyWaiters) { plotlyWaiters.push(then); return; }
    plotlyWaiters = [then];
    var s = document.createElement("script");
    s.src = url;
    s.onload = function () { plotlyWaiters.forEach(function (f) { f(); }); };
    document.head.appendChild(s);
  }

  function follow(box) {
    var url = box.dataset.telemetryUrl;
    var every = parseFloat(box.dataset.refresh || "10") * 1000;
    var initial = box.dataset.initial && document.getElementById(box.dataset.initial);
    function show(data) {
      var any = data.gpus ? data.gpus.some(function (g) { return g.series.t.length; }) : !!data.series;
      box.hidden = !any && !data.unavailable && box.dataset.hideEmpty === "1";
      if (any) { withPlotly(box.dataset.plotlyUrl, function () { draw(box, data); }); } else { draw(box, data); }
    }
    if (initial) { show(JSON.parse(initial.textContent)); }
    function load() {
      var win = document.getElementById(box.id + "-window");
      fetch(url + (win ? "?window=" + win.value : ""), {credentials: "same-origin"})
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (data) { if (data) { show(data); } })
        .catch(function () {});
    }
    load();
    setInterval(load, every);
    var win = document.getElementById(box.id + "-window");
    if (win) { win.addEventListener("change", load); }
  }

  document.querySelectorAll("[data-telemetry-url]").forEach(follow);
})();
