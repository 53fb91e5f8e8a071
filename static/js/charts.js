// Latency and load charts of the metrics panel (templates/metrics/_graph_panel.html).
// The page loads this file and uPlot (templates/metrics/_graph_panel_include.html); the panel
// arrives later by htmx, and is set up on htmx:load. Should uPlot be missing, it is loaded
// from the panel's data-uplot URL. No inline scripts or handlers: the pages run under a
// strict CSP, and htmx does not run scripts in what it swaps in.
(function () {
  "use strict";
  if (window.DynamoCharts) {
    window.DynamoCharts.scan();
    return;
  }

  // Okabe-Ito colours stay distinguishable with the common colour-vision deficiencies, and
  // every series on a chart also has its own dash pattern: nothing depends on colour alone.
  const C = {
    black: "#000000", orange: "#E69F00", sky: "#56B4E9", green: "#009E73",
    blue: "#0072B2", vermillion: "#D55E00", purple: "#CC79A7", grey: "#555555",
  };
  const quantiles = (prefix) => [
    { key: prefix + "_p50", label: "p50", stroke: C.blue, dash: [] },
    { key: prefix + "_p90", label: "p90", stroke: C.orange, dash: [8, 4] },
    { key: prefix + "_p99", label: "p99", stroke: C.vermillion, dash: [2, 3] },
  ];
  const CHARTS = {
    ttft: { unit: "ms", series: quantiles("ttft"), slo: "ttft_ms", labels: true },
    itl: { unit: "ms", series: quantiles("itl"), slo: "itl_ms" },
    requests: { unit: "req/s", series: [{ key: "request_rate", label: "requests/s", stroke: C.green, dash: [] }] },
    tokens: { unit: "tokens/s", series: [{ key: "output_tokens", label: "output tokens/s", stroke: C.purple, dash: [] }] },
    in_flight: { unit: "requests", series: [{ key: "in_flight", label: "in flight", stroke: C.sky, dash: [] }] },
    goodput: { unit: "%", scale: 100, series: [{ key: "goodput", label: "goodput", stroke: C.green, dash: [6, 3] }] },
  };
  const SLO_STYLE = { stroke: C.black, dash: [12, 4, 2, 4] };
  let uplotLoading = null;

  function ensureUplot(panel) {
    if (window.uPlot) return Promise.resolve();
    if (!uplotLoading) {
      uplotLoading = new Promise((resolve, reject) => {
        const script = document.createElement("script");
        script.src = panel.dataset.uplot;
        script.onload = resolve;
        script.onerror = () => reject(new Error("could not load uPlot"));
        document.head.appendChild(script);
      });
    }
    return uplotLoading;
  }

  function fmt(value, unit, digits) {
    if (value === null || value === undefined) return "—";
    const d = digits !== undefined ? digits : (Math.abs(value) >= 100 ? 0 : Math.abs(value) >= 10 ? 1 : 2);
    return value.toFixed(d) + (unit ? " " + unit : "");
  }

  function setStatus(panel, state, message) {
    panel.dataset.state = state;
    const el = panel.querySelector("[data-status]");
    el.textContent = message || "";
    el.className = "metrics-status state-" + state;
  }

  function setStat(panel, name, text, cls) {
    const el = panel.querySelector('[data-stat="' + name + '"]');
    if (!el) return;
    el.textContent = text;
    el.className = cls || "";
  }

  function sloClass(value, target) {
    if (!target || value === null || value === undefined) return "";
    return value <= target ? "slo-met" : "slo-missed";
  }

  function summary(panel, data) {
    const s = data.summary || {};
    const o = data.objectives || {};
    const triple = (p) => [p + "_p50", p + "_p90", p + "_p99"].map((k) => fmt(s[k], "", 1)).join(" / ") + " ms";
    setStat(panel, "ttft", triple("ttft") + (o.ttft_ms ? "  (target " + o.ttft_ms + " ms at p90)" : ""),
      sloClass(s.ttft_p90, o.ttft_ms));
    setStat(panel, "itl", triple("itl") + (o.itl_ms ? "  (target " + o.itl_ms + " ms at p90)" : ""),
      sloClass(s.itl_p90, o.itl_ms));
    setStat(panel, "request_rate", fmt(s.request_rate, "/s"));
    setStat(panel, "tokens", fmt(s.input_tokens, "") + " / " + fmt(s.output_tokens, "per s"));
    const g = s.goodput;
    const pct = (v) => (100 * v).toFixed(1) + "%";
    const has = (v) => v !== null && v !== undefined;
    setStat(panel, "kv_hit_rate", has(s.kv_hit_rate)
      ? pct(s.kv_hit_rate) + (has(s.cached_token_share) ? " (engines: " + pct(s.cached_token_share) + " of prompt tokens cached)" : "")
      : (has(s.cached_token_share) ? "no KV routing; engines: " + pct(s.cached_token_share) + " cached" : "—"));
    setStat(panel, "goodput", g ? pct(g.estimate) + " (between " + pct(g.lower) + " and " + pct(g.upper) + ")"
      : (o.ttft_ms || o.itl_ms ? "no traffic" : "set targets below"));
    const c = s.cost || {};
    let cost = "set a GPU-hour price below";
    if (c.reason) {
      cost = "— (" + c.reason + ")";
    } else if (c.gpu_hour_price !== null && c.gpu_hour_price !== undefined) {
      cost = c.per_million_tokens !== null && c.per_million_tokens !== undefined
        ? fmt(c.per_million_tokens, c.currency) + " (all tokens, aggregated workers)"
        : fmt(c.per_million_input, "") + " / " + fmt(c.per_million_output, c.currency);
    }
    setStat(panel, "cost", cost);
    const t = s.targets;
    setStat(panel, "targets", t ? t.up + " of " + t.total + " up" + (t.down.length ? " (down: " + t.down.join(", ") + ")" : "") : "—",
      t && t.down.length ? "slo-missed" : "");
  }

  function markerList(panel, data) {
    const list = panel.querySelector("[data-markers]");
    list.replaceChildren();
    if (!data.markers.length) {
      const li = document.createElement("li");
      li.className = "muted";
      li.textContent = "None.";
      list.appendChild(li);
      return;
    }
    data.markers.forEach((m) => {
      const li = document.createElement("li");
      li.className = "marker marker-" + m.state;
      li.textContent = new Date(m.at * 1000).toLocaleString() + ": " + m.label + " (" + m.by + ")";
      list.appendChild(li);
    });
  }

  // Applies and scale changes as vertical lines, numbered as in the list under the charts.
  function drawMarkers(markers, numbered) {
    return (u) => {
      const ctx = u.ctx;
      const dpr = window.devicePixelRatio || 1;
      ctx.save();
      markers.forEach((m, i) => {
        const x = Math.round(u.valToPos(m.at, "x", true));
        if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) return;
        ctx.strokeStyle = m.state === "succeeded" ? C.grey : C.vermillion;
        ctx.lineWidth = dpr;
        ctx.setLineDash(m.kind === "scale" ? [4 * dpr, 3 * dpr] : []);
        ctx.beginPath();
        ctx.moveTo(x, u.bbox.top);
        ctx.lineTo(x, u.bbox.top + u.bbox.height);
        ctx.stroke();
        if (numbered) {
          ctx.fillStyle = C.black;
          ctx.font = (11 * dpr) + "px system-ui, sans-serif";
          ctx.fillText(String(i + 1), x + 3 * dpr, u.bbox.top + 12 * dpr);
        }
      });
      ctx.restore();
    };
  }

  function chart(panel, figure, data) {
    const spec = CHARTS[figure.dataset.chart];
    const box = figure.querySelector(".plot");
    if (panel._plots[figure.dataset.chart]) panel._plots[figure.dataset.chart].destroy();
    delete panel._plots[figure.dataset.chart];
    const scale = spec.scale || 1;
    const n = data.timestamps.length;
    const columns = spec.series.map((s) => {
      const col = data.series[s.key] || [];
      return col.length === n ? col.map((v) => (v === null ? null : v * scale)) : new Array(n).fill(null);
    });
    const hasData = columns.some((col) => col.some((v) => v !== null));
    figure.classList.toggle("empty", !hasData);
    const o = data.objectives || {};
    if (!hasData && spec.series[0].key === "goodput" && !o.ttft_ms && !o.itl_ms) {
      box.textContent = "Set SLO targets below to see goodput.";
      return;
    }
    if (!n) {
      box.textContent = "No data.";
      return;
    }
    box.replaceChildren();
    if (hasData) box.removeAttribute("aria-label");
    else box.setAttribute("aria-label", "No requests in this window");
    // Sparse series (a graph that just started, a burst of traffic) get dots: a lone point
    // between gaps draws no line.
    const sparse = (col) => col.filter((v) => v !== null).length <= 30;
    const series = [{}].concat(spec.series.map((s, i) => ({
      label: s.label, stroke: s.stroke, dash: s.dash, width: 2, spanGaps: false,
      points: { show: sparse(columns[i]), size: 5, fill: s.stroke },
      value: (u, v) => fmt(v, spec.unit),
    })));
    const target = spec.slo ? o[spec.slo] : null;
    if (target) {
      series.push({ label: "SLO target", stroke: SLO_STYLE.stroke, dash: SLO_STYLE.dash, width: 1.5,
        value: () => fmt(target, spec.unit) });
      columns.push(data.timestamps.map(() => target));
    }
    const opts = {
      width: Math.max(280, box.clientWidth || 480), height: 190,
      series: series,
      scales: {
        x: { time: true, range: [data.start, data.end] },
        y: { range: (u, min, max) => [0, Math.max(max || 0, target || 0, 1e-9) * 1.1] },
      },
      axes: [{}, { label: spec.unit, size: 60, values: (u, ticks) => ticks.map((v) => fmt(v, "")) }],
      legend: { live: true },
      cursor: { drag: { x: false, y: false } },
      hooks: { draw: [drawMarkers(data.markers || [], !!spec.labels)] },
    };
    panel._plots[figure.dataset.chart] = new window.uPlot(opts, [data.timestamps].concat(columns), box);
  }

  function render(panel, data) {
    const source = panel.querySelector("[data-source]");
    if (source) source.textContent = "from " + data.prometheus + ", every " + data.step + " s, rate over " + data.rate_window + " s";
    if (data.state === "unreachable" || data.state === "error") {
      setStatus(panel, data.state, data.message);
      return;
    }
    setStatus(panel, data.state, data.message);
    summary(panel, data);
    markerList(panel, data);
    panel.querySelectorAll("[data-chart]").forEach((figure) => chart(panel, figure, data));
  }

  async function load(panel) {
    clearTimeout(panel._timer);
    if (!panel.isConnected) return;
    const url = new URL(panel.dataset.chartUrl, window.location.href);
    url.searchParams.set("window", panel.dataset.window);
    let data = null;
    try {
      const response = await fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
      data = await response.json();
      if (!response.ok) throw new Error(data.detail || response.statusText);
      await ensureUplot(panel);
      render(panel, data);
    } catch (err) {
      setStatus(panel, "error", "Could not load the chart data: " + err.message);
    }
    // Refresh at the chart's own resolution, never faster than every ten seconds.
    const every = Math.max(10, data && data.step ? data.step : 30) * 1000;
    panel._timer = setTimeout(() => { if (document.visibilityState !== "hidden") load(panel); else schedule(panel); }, every);
  }

  function schedule(panel) {
    panel._timer = setTimeout(() => load(panel), 10000);
  }

  function init(panel) {
    if (panel._metricsReady) return;
    panel._metricsReady = true;
    panel._plots = {};
    panel.addEventListener("click", (event) => {
      const button = event.target.closest("button[data-window]");
      if (!button) return;
      panel.dataset.window = button.dataset.window;
      panel.querySelectorAll("button[data-window]").forEach((b) => {
        b.classList.toggle("current", b === button);
        b.setAttribute("aria-pressed", b === button ? "true" : "false");
      });
      setStatus(panel, "loading", "Loading " + button.dataset.window + "…");
      load(panel);
    });
    load(panel);
  }

  function scan() {
    document.querySelectorAll("[data-metrics-panel]").forEach(init);
  }

  // Saving objectives redraws the SLO lines; a refused form (400) is swapped in with its errors.
  document.addEventListener("htmx:beforeSwap", (event) => {
    const target = event.detail.target;
    if (target && target.id === "metrics-objectives" && event.detail.xhr.status === 400) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });
  document.addEventListener("htmx:afterSwap", (event) => {
    if (event.detail.target && event.detail.target.id === "metrics-objectives") {
      document.querySelectorAll("[data-metrics-panel]").forEach((panel) => load(panel));
    }
  });
  document.addEventListener("htmx:load", scan);
  window.addEventListener("resize", () => {
    document.querySelectorAll("[data-metrics-panel]").forEach((panel) => {
      Object.values(panel._plots || {}).forEach((u) => {
        const box = u.root.parentElement;
        u.setSize({ width: Math.max(280, box.clientWidth || 480), height: 190 });
      });
    });
  });
  window.DynamoCharts = { scan: scan, load: load };
  scan();
})();
