// The estimate page's Pareto chart: tokens/s/GPU against tokens/s/user, one line per
// experiment (agg, disagg), its ranked configurations as larger points. Data comes from the
// data-json attribute of #pareto-data (no inline scripts under the CSP, and no <script> island:
// htmx drops those from swapped fragments); the chart is drawn on htmx:load too, since the
// status fragment that holds it is swapped in when the estimate ends.
(function () {
  "use strict";

  const COLORS = { agg: "#1f77b4", disagg: "#d62728" };

  function draw(root) {
    const figure = root.querySelector ? root.querySelector("#pareto") : null;
    const island = document.getElementById("pareto-data");
    if (!figure || !island || !window.uPlot || figure.dataset.drawn) return;
    const data = JSON.parse(island.dataset.json);
    const names = Object.keys(data);
    const xs = Array.from(new Set(names.flatMap((n) => data[n].pareto.concat(data[n].ranked).map((p) => p.x))))
      .sort((a, b) => a - b);
    const columns = [xs];
    const series = [{ label: "tokens/s/user" }];
    names.forEach((name) => {
      const color = COLORS[name] || "#555";
      const line = new Map(data[name].pareto.map((p) => [p.x, p.y]));
      const ranked = new Map(data[name].ranked.map((p) => [p.x, p.y]));
      columns.push(xs.map((x) => (line.has(x) ? line.get(x) : null)));
      columns.push(xs.map((x) => (ranked.has(x) ? ranked.get(x) : null)));
      series.push({ label: name + " Pareto front", stroke: color, width: 2, spanGaps: true,
        points: { show: true, size: 4 } });
      series.push({ label: name + " ranked", stroke: color, width: 0, paths: () => null,
        points: { show: true, size: 10, fill: color } });
    });
    const plot = figure.querySelector(".plot");
    plot.textContent = "";
    const width = Math.max(320, Math.min(900, plot.clientWidth || 800));
    // eslint-disable-next-line no-new
    new window.uPlot({ width, height: 320, series, scales: { x: { time: false } },
      axes: [{ label: "tokens/s/user" }, { label: "tokens/s/GPU" }] }, columns, plot);
    figure.dataset.drawn = "1";
  }

  document.addEventListener("DOMContentLoaded", () => draw(document));
  document.addEventListener("htmx:load", (event) => draw(event.target.parentNode || document));
})();
