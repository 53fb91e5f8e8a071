// The Planner timeline of a graph's page (templates/metrics/_planner_timeline.html): three
// stacked uPlot panels sharing one time axis and one cursor (load, replicas, latency), each
// Planner decision drawn as a numbered vertical line, listed with its reason underneath, and
// the "Planner health" line above. Data: GET /api/graphs/<name>/planner/?window=…
// No inline scripts: the pages run under a strict CSP.
(function () {
  "use strict";
  if (window.DynamoPlannerTimeline) {
    window.DynamoPlannerTimeline.scan();
    return;
  }
  const C = { black: "#000000", orange: "#E69F00", sky: "#56B4E9", green: "#009E73", blue: "#0072B2",
    vermillion: "#D55E00", purple: "#CC79A7", grey: "#555555" };
  const POOL_COLOURS = [C.blue, C.orange, C.green, C.purple, C.sky];
  let uplotLoading = null;

  function ensureUplot(section) {
    if (window.uPlot) return Promise.resolve();
    if (!uplotLoading) {
      uplotLoading = new Promise((resolve, reject) => {
        const script = document.createElement("script");
        script.src = section.dataset.uplot;
        script.onload = resolve;
        script.onerror = () => reject(new Error("could not load uPlot"));
        document.head.appendChild(script);
      });
    }
    return uplotLoading;
  }

  function fmt(v, unit) {
    if (v === null || v === undefined) return "—";
    const d = Math.abs(v) >= 100 ? 0 : Math.abs(v) >= 10 ? 1 : 2;
    return v.toFixed(d) + (unit ? " " + unit : "");
  }

  // Step points [[t, v], …] as one value per timestamp: the last point at or before it.
  function steps(points, timestamps) {
    let i = -1;
    return timestamps.map((t) => {
      while (i + 1 < points.length && points[i + 1][0] <= t) i++;
      return i >= 0 ? points[i][1] : null;
    });
  }

  function drawDecisions(decisions) {
    return (u) => {
      const ctx = u.ctx;
      const dpr = window.devicePixelRatio || 1;
      ctx.save();
      decisions.forEach((d, i) => {
        const x = Math.round(u.valToPos(d.at, "x", true));
        if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) return;
        ctx.strokeStyle = d.state === "failed" ? C.vermillion : C.grey;
        ctx.lineWidth = 1.5 * dpr;
        ctx.setLineDash(d.state === "acknowledged" || d.state === "observed" ? [] : [4 * dpr, 3 * dpr]);
        ctx.beginPath();
        ctx.moveTo(x, u.bbox.top);
        ctx.lineTo(x, u.bbox.top + u.bbox.height);
        ctx.stroke();
        ctx.fillStyle = C.black;
        ctx.font = (11 * dpr) + "px system-ui, sans-serif";
        ctx.fillText(String(i + 1), x + 3 * dpr, u.bbox.top + 12 * dpr);
      });
      ctx.restore();
    };
  }

  function plot(section, key, data, series, columns, yRange) {
    const box = section.querySelector('[data-plot="' + key + '"] .plot');
    if (section._plots[key]) section._plots[key].destroy();
    box.replaceChildren();
    const has = columns.some((c) => c.some((v) => v !== null && v !== undefined));
    box.parentElement.classList.toggle("empty", !has);
    const opts = {
      width: Math.max(300, box.clientWidth || 640), height: 150,
      series: [{}].concat(series),
      scales: { x: { time: true, range: [data.start, Math.max(data.end, data.now || data.end)] }, y: { range: yRange }, y2: { range: (u, mn, mx) => [0, Math.max(mx || 0, 1) * 1.1] } },
      // Every panel has a right axis of the same width (empty where there is no second
      // scale), so the three plot areas line up on the shared time axis.
      axes: [{}, { size: 60 }, series.some((s) => s.scale === "y2")
        ? { scale: "y2", side: 1, size: 60, grid: { show: false } }
        : { scale: "y", side: 1, size: 60, grid: { show: false }, ticks: { show: false }, values: (u, ticks) => ticks.map(() => "") }],
      legend: { live: true },
      cursor: { sync: { key: section._syncKey }, drag: { x: false, y: false } },
      hooks: { draw: [drawDecisions(data.decisions)] },
    };
    section._plots[key] = new window.uPlot(opts, [data.timestamps].concat(columns), box);
  }

  function render(section, data) {
    const t = data.timestamps;
    const s = data.series;
    const reported = data.estimates_reported;
    // Load
    const load = [
      { label: "requests/s", stroke: C.green, width: 2, value: (u, v) => fmt(v, "/s") },
      { label: "input tokens/s", stroke: C.purple, dash: [6, 3], width: 2, scale: "y2", value: (u, v) => fmt(v, "/s") },
    ];
    const loadCols = [s.request_rate, s.input_tokens];
    if (reported) {
      load.push({ label: "Planner predicted requests/s", stroke: C.grey, dash: [2, 3], width: 1.5, value: (u, v) => fmt(v, "/s") });
      loadCols.push(s.planner_predicted_requests_per_second);
    }
    plot(section, "load", data, load, loadCols, (u, mn, mx) => [0, Math.max(mx || 0, 0.1) * 1.1]);
    // Replicas
    const reps = [];
    const repCols = [];
    Object.keys(data.replicas).forEach((pool, i) => {
      const colour = POOL_COLOURS[i % POOL_COLOURS.length];
      reps.push({ label: pool + " desired", stroke: colour, dash: [6, 4], width: 2, value: (u, v) => fmt(v, "") });
      repCols.push(steps(data.replicas[pool].desired, t));
      reps.push({ label: pool + " ready", stroke: colour, width: 2, value: (u, v) => fmt(v, "") });
      repCols.push(steps(data.replicas[pool].ready, t));
    });
    if (reported) {
      reps.push({ label: "Planner predicted prefill", stroke: C.grey, dash: [2, 3], width: 1 });
      repCols.push(s.planner_predicted_num_prefill_replicas);
      reps.push({ label: "Planner predicted decode", stroke: C.black, dash: [2, 3], width: 1 });
      repCols.push(s.planner_predicted_num_decode_replicas);
    }
    plot(section, "replicas", data, reps, repCols, (u, mn, mx) => [0, Math.max(mx || 0, 1) + 1]);
    // Latency against the targets
    const g = data.targets || {};
    const lat = [
      { label: "TTFT p90", stroke: C.blue, width: 2, value: (u, v) => fmt(v, "ms") },
      { label: "ITL p90", stroke: C.orange, width: 2, dash: [8, 4], value: (u, v) => fmt(v, "ms") },
    ];
    const latCols = [s.ttft_p90, s.itl_p90];
    if (g.ttft_ms) { lat.push({ label: "TTFT target", stroke: C.blue, dash: [12, 4, 2, 4], width: 1 }); latCols.push(t.map(() => g.ttft_ms)); }
    if (g.itl_ms) { lat.push({ label: "ITL target", stroke: C.orange, dash: [12, 4, 2, 4], width: 1 }); latCols.push(t.map(() => g.itl_ms)); }
    if (reported) {
      lat.push({ label: "Planner estimated TTFT", stroke: C.grey, dash: [2, 3], width: 1 });
      latCols.push(s.planner_estimated_ttft_ms);
      lat.push({ label: "Planner estimated ITL", stroke: C.black, dash: [2, 3], width: 1 });
      latCols.push(s.planner_estimated_itl_ms);
    }
    plot(section, "latency", data, lat, latCols, (u, mn, mx) => [0, Math.max(mx || 0, g.ttft_ms || 0, 1) * 1.1]);
    // Health and decisions
    const h = data.health;
    const health = section.querySelector("[data-health]");
    health.textContent = "Planner health: " + h.message;
    health.className = "planner-health health-" + h.level;
    const warnings = section.querySelector("[data-warnings]");
    warnings.replaceChildren(...h.warnings.map((w) => {
      const li = document.createElement("li");
      li.textContent = "Warning: " + w;
      return li;
    }));
    const list = section.querySelector("[data-decisions]");
    list.replaceChildren();
    if (!data.decisions.length) {
      const li = document.createElement("li");
      li.className = "muted";
      li.textContent = "None.";
      list.appendChild(li);
    }
    data.decisions.forEach((d) => {
      const li = document.createElement("li");
      li.className = "decision decision-" + d.state;
      const who = d.decision_id !== null ? "decision " + d.decision_id : "decision";
      li.textContent = new Date(d.at * 1000).toLocaleTimeString() + ": " + who + ": " + d.reason + " · " + d.state +
        (d.acknowledged_at ? " after " + (d.acknowledged_at - d.at).toFixed(1) + " s" : "") + (d.message && d.state === "failed" ? " (" + d.message + ")" : "") +
        " · " + (d.source === "virtual-connector" ? "virtual connector" : d.source) + (d.actor && d.actor !== "planner" ? ", by " + d.actor : "");
      list.appendChild(li);
    });
    const status = section.querySelector("[data-status]");
    status.textContent = data.message || "";
    status.className = "metrics-status state-" + data.state;
    section.dataset.state = data.state;
  }

  async function load(section) {
    clearTimeout(section._timer);
    if (!section.isConnected) return;
    const url = new URL(section.dataset.url, window.location.href);
    url.searchParams.set("window", section.dataset.window);
    let data = null;
    try {
      const response = await fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
      data = await response.json();
      if (!response.ok) throw new Error(data.detail || JSON.stringify(data));
      await ensureUplot(section);
      render(section, data);
    } catch (err) {
      const status = section.querySelector("[data-status]");
      status.textContent = "Could not load the Planner timeline: " + err.message;
      status.className = "metrics-status state-error";
    }
    const every = Math.max(5, data && data.step ? data.step : 15) * 1000;
    section._timer = setTimeout(() => load(section), every);
  }

  function init(section) {
    if (section._ready) return;
    section._ready = true;
    section._plots = {};
    section._syncKey = "planner-" + Math.random().toString(36).slice(2);
    section.addEventListener("click", (event) => {
      const button = event.target.closest("button[data-window]");
      if (!button) return;
      section.dataset.window = button.dataset.window;
      section.querySelectorAll("button[data-window]").forEach((b) => {
        b.classList.toggle("current", b === button);
        b.setAttribute("aria-pressed", b === button ? "true" : "false");
      });
      load(section);
    });
    load(section);
  }

  function scan() {
    document.querySelectorAll("[data-planner-timeline]").forEach(init);
  }
  document.addEventListener("htmx:load", scan);
  window.DynamoPlannerTimeline = { scan: scan, load: load };
  scan();
})();
