/* The usage page: GPU-hours over time as a stacked area, one trace per project or user. */
"use strict";

(() => {
  const report = Live.readJson("usage-report");
  // Each value holds from its bucket's start to the next one's; the last one up to the period's end.
  const buckets = [...report.series.buckets, report.to];
  const traces = Object.entries(report.series.gpu_hours).map(([name, values]) => ({
    x: buckets, y: [...values, values[values.length - 1]], name, type: "scatter", mode: "lines",
    stackgroup: "usage", line: { shape: "hv" },
  }));
  const layout = {
    margin: { t: 10, r: 10, b: 45, l: 55 }, height: 320, legend: { orientation: "h", y: 1.12 },
    xaxis: { title: { text: "UTC" } },
    yaxis: { title: { text: "GPU-hours per " + (report.bucket_seconds === 3600 ? "hour" : report.bucket_seconds === 86400 ? "day" : "week") } },
    template: "plotly_white",
    annotations: traces.length ? [] : [{ text: "no usage in this period", showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5 }],
  };
  Plotly.react("usage-area", traces, layout, Live.PLOT_CONFIG);
})();
