// Benchmark charts: latency p90 against output throughput, one line per run (a sweep's load
// points joined), overlaid. Data comes from the data-json attribute of a hidden element: no
// inline scripts (the pages run under a strict CSP) and no <script type="application/json">
// island, which htmx (allowScriptTags false) drops from what it swaps in. Charts in fragments
// that htmx swaps in (a run's status when it finishes) are set up on htmx:load.
(function () {
  "use strict";

  const SLO_KEYS = { ttft: "ttft_ms", itl: "itl_ms" };

  function fmt(value) {
    if (value === null || value === undefined) return "—";
    return Math.abs(value) >= 100 ? value.toFixed(0) : Math.abs(value) >= 10 ? value.toFixed(1) : value.toFixed(2);
  }

  function aligned(series, metric) {
    const xs = Array.from(new Set(series.flatMap((s) => s.points.filter((p) => p[metric] !== null).map((p) => p.x))))
      .sort((a, b) => a - b);
    const ys = series.map((s) => xs.map((x) => {
      const point = s.points.find((p) => p.x === x && p[metric] !== null);
      return point ? point[metric] : null;
    }));
    return { xs, ys };
  }

  function draw(figure, data) {
    const metric = figure.dataset.metric;
    const plot = figure.querySelector(".plot");
    const { xs, ys } = aligned(data.series, metric);
    plot.textContent = "";
    if (!xs.length) {
      plot.textContent = "No data for this chart.";
      return;
    }
    const series = [{ label: "output tokens/s", value: (u, v) => fmt(v) }];
    data.series.forEach((s) => {
      series.push({
        label: s.label, stroke: s.color, width: 2, spanGaps: true,
        dash: s.dash ? s.dash.split(" ").map(Number) : undefined,
        points: { show: true, size: 8, fill: s.color, stroke: s.color },
        value: (u, v) => fmt(v) + " ms",
      });
    });
    const columns = [xs, ...ys];
    const target = data.slo && data.slo[SLO_KEYS[metric]];
    if (target) {
      series.push({ label: "target", stroke: "#000000", width: 1.5, dash: [12, 4, 2, 4], points: { show: false },
        value: () => fmt(target) + " ms" });
      columns.push(xs.map(() => target));
    }
    const width = Math.max(280, plot.clientWidth || figure.clientWidth || 420);
    const chart = new window.uPlot({
      width, height: 240, series,
      scales: { x: { time: false, range: (u, min, max) => [0, (max || 1) * 1.1] },
                y: { range: (u, min, max) => [0, (max || 1) * 1.15] } },
      axes: [{ label: "output tokens/s" }, { label: "ms", size: 60 }],
      legend: { live: true },
    }, columns, plot);
    figure._chart = chart;
  }

  function setup(root) {
    root.querySelectorAll("[data-bench-charts]").forEach((box) => {
      const island = document.getElementById(box.dataset.benchCharts);
      if (!island || !window.uPlot) return;
      let data;
      try {
        data = JSON.parse(island.dataset.json);
      } catch (e) {
        return;
      }
      box.querySelectorAll(".bench-chart").forEach((figure) => draw(figure, data));
    });
  }

  function resize() {
    document.querySelectorAll(".bench-chart").forEach((figure) => {
      const plot = figure.querySelector(".plot");
      if (figure._chart && plot) figure._chart.setSize({ width: Math.max(280, plot.clientWidth), height: 240 });
    });
  }

  document.addEventListener("DOMContentLoaded", () => setup(document));
  document.addEventListener("htmx:load", (event) => setup(event.target));
  window.addEventListener("resize", resize);
})();
