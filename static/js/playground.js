// The playground: stream chats through /api/playground/{graph}/v1/chat/completions and time
// every reply from the arrival of its SSE events. An ES module with no inline script (the
// pages run under a strict CSP); the pure functions are exported for the tests.
//
// The numbers follow playground/timing.py (the tests hold the two together):
//   TTFT          request sent -> first event carrying content
//   ITL           gaps between consecutive content events (mean and p90)
//   tokens/s      (completion tokens - 1) / (last content event - first content event)

// --- pure functions ---------------------------------------------------------------------------

export function percentile(values, q) {
  if (!values.length) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const pos = (sorted.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.min(lo + 1, sorted.length - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
}

const round = (x, digits) => (x === null || x === undefined ? null : Number(x.toFixed(digits)));

export function summarise(start, arrivals, completionTokens = null, end = null) {
  const out = { chunks: arrivals.length, ttft_ms: null, itl_mean_ms: null, itl_p90_ms: null,
                tokens_per_s: null, total_ms: end === null ? null : round(end - start, 3) };
  if (!arrivals.length) return out;
  out.ttft_ms = round(arrivals[0] - start, 3);
  if (out.total_ms === null) out.total_ms = round(arrivals[arrivals.length - 1] - start, 3);
  const gaps = [];
  for (let i = 1; i < arrivals.length; i++) gaps.push(arrivals[i] - arrivals[i - 1]);
  if (gaps.length) {
    out.itl_mean_ms = round(gaps.reduce((a, b) => a + b, 0) / gaps.length, 3);
    out.itl_p90_ms = round(percentile(gaps, 0.9), 3);
  }
  const decodeMs = arrivals[arrivals.length - 1] - arrivals[0];
  const tokens = completionTokens === null ? arrivals.length : completionTokens;
  if (decodeMs > 0 && tokens > 1) out.tokens_per_s = round((tokens - 1) / (decodeMs / 1000), 2);
  return out;
}

// nvext.timing of the finish chunk -> the waterfall's segments (ms).
export function serverBreakdown(timing) {
  if (!timing) return null;
  const num = (k) => (typeof timing[k] === "number" ? timing[k] : null);
  const ttft = num("ttft_ms");
  const total = num("total_time_ms");
  return {
    queue_ms: num("prefill_wait_time_ms"),
    prefill_ms: num("prefill_time_ms"),
    kv_transfer_ms: num("kv_transfer_estimated_latency_ms"),
    decode_ms: ttft !== null && total !== null ? round(total - ttft, 3) : null,
    ttft_ms: ttft,
    total_ms: total,
  };
}

// Worker ids are 64-bit integers: JSON.parse would round them, so read the digits from the text.
export function workerIds(data) {
  const prefill = /"prefill_worker_id"\s*:\s*(\d+)/.exec(data);
  const decode = /"decode_worker_id"\s*:\s*(\d+)/.exec(data);
  return { prefill: prefill ? prefill[1] : null, decode: decode ? decode[1] : null };
}

// Split a text buffer into complete SSE events; returns the data of each and the rest.
export function parseSSE(buffer) {
  const events = [];
  const parts = buffer.split(/\r?\n\r?\n/);
  const rest = parts.pop();
  for (const block of parts) {
    const data = block.split(/\r?\n/).filter((l) => l.startsWith("data:"))
      .map((l) => l.slice(5).replace(/^ /, "")).join("\n");
    if (data) events.push(data);
  }
  return { events, rest };
}

function shellQuote(text) {
  return "'" + text.replace(/'/g, "'\\''") + "'";
}

export function curlSnippet(origin, graph, body) {
  const url = `${origin}/api/playground/${encodeURIComponent(graph)}/v1/chat/completions`;
  return [
    `curl -N ${shellQuote(url)} \\`,
    `  -H "Authorization: Token $DCP_TOKEN" \\`,
    `  -H 'Content-Type: application/json' \\`,
    `  -d ${shellQuote(JSON.stringify(body, null, 2))}`,
  ].join("\n");
}

export function pyLiteral(value, indent = 0) {
  const pad = "    ".repeat(indent + 1);
  const end = "    ".repeat(indent);
  if (value === null || value === undefined) return "None";
  if (value === true) return "True";
  if (value === false) return "False";
  if (typeof value === "number") return String(value);
  if (typeof value === "string") return JSON.stringify(value);
  if (Array.isArray(value)) {
    if (!value.length) return "[]";
    return "[\n" + value.map((v) => pad + pyLiteral(v, indent + 1)).join(",\n") + ",\n" + end + "]";
  }
  const keys = Object.keys(value);
  if (!keys.length) return "{}";
  return "{\n" + keys.map((k) => `${pad}${JSON.stringify(k)}: ${pyLiteral(value[k], indent + 1)}`).join(",\n") +
    ",\n" + end + "}";
}

export function pythonSnippet(origin, graph, body) {
  const known = ["model", "messages", "temperature", "top_p", "max_tokens", "stop", "stream", "stream_options"];
  const args = known.filter((k) => body[k] !== undefined)
    .map((k) => `    ${k}=${pyLiteral(body[k], 1)},`);
  const extra = Object.fromEntries(Object.entries(body).filter(([k]) => !known.includes(k)));
  if (Object.keys(extra).length) args.push(`    extra_body=${pyLiteral(extra, 1)},`);
  return [
    "import os",
    "",
    "from openai import OpenAI",
    "",
    "client = OpenAI(",
    `    base_url=${JSON.stringify(`${origin}/api/playground/${encodeURIComponent(graph)}/v1`)},`,
    '    api_key=os.environ["DCP_TOKEN"],  # your control-plane API token',
    ")",
    "stream = client.chat.completions.create(",
    ...args,
    ")",
    "for chunk in stream:",
    "    if chunk.choices and chunk.choices[0].delta.content:",
    '        print(chunk.choices[0].delta.content, end="", flush=True)',
    "print()",
  ].join("\n");
}

// --- streaming --------------------------------------------------------------------------------

function csrfToken() {
  try {
    return JSON.parse(document.body.getAttribute("hx-headers") || "{}")["X-CSRFToken"] || "";
  } catch {
    return "";
  }
}

// POST one chat request and read its SSE stream. Calls onDelta(text) for every content piece.
// Resolves (never rejects) with {content, timing, error, stopped}.
export async function streamChat(url, body, { signal, onDelta = () => {} } = {}) {
  const arrivals = [];
  let content = "";
  let finishReason = null;
  let usage = null;
  let nvTiming = null;
  let workers = { prefill: null, decode: null };
  let error = null;
  let stopped = false;
  const start = performance.now();
  try {
    const response = await fetch(url, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken(), Accept: "text/event-stream" },
      body: JSON.stringify(body),
      credentials: "same-origin",
      signal,
    });
    if (!response.ok || !(response.headers.get("content-type") || "").startsWith("text/event-stream")) {
      const text = await response.text();
      let message = text.slice(0, 500) || response.statusText;
      try { message = JSON.parse(text).error.message || message; } catch { /* not JSON */ }
      const retry = response.headers.get("Retry-After");
      error = `${response.status}: ${message}${retry ? ` (retry after ${retry} s)` : ""}`;
    } else {
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        const now = performance.now();
        buffer += decoder.decode(value, { stream: true });
        const parsed = parseSSE(buffer);
        buffer = parsed.rest;
        for (const data of parsed.events) {
          if (data === "[DONE]") continue;
          let chunk;
          try { chunk = JSON.parse(data); } catch { continue; }
          if (chunk.error) { error = chunk.error.message || "the stream failed"; continue; }
          const choice = (chunk.choices || [])[0];
          const piece = choice && choice.delta && choice.delta.content;
          if (piece) {
            arrivals.push(now);
            content += piece;
            onDelta(piece);
          }
          if (choice && choice.finish_reason) finishReason = choice.finish_reason;
          if (chunk.usage) usage = chunk.usage;
          if (chunk.nvext) {
            if (chunk.nvext.timing) nvTiming = chunk.nvext.timing;
            if (chunk.nvext.worker_id && !workers.prefill && !workers.decode) workers = workerIds(data);
          }
        }
      }
    }
  } catch (exc) {
    if (exc.name === "AbortError") stopped = true;
    else error = `the playground could not be reached (${exc.message})`;
  }
  const end = performance.now();
  const timing = summarise(start, arrivals, usage ? usage.completion_tokens : null, end);
  Object.assign(timing, {
    prompt_tokens: usage ? usage.prompt_tokens : null,
    completion_tokens: usage ? usage.completion_tokens : null,
    finish_reason: stopped ? "stopped" : finishReason,
    prefill_worker_id: workers.prefill,
    decode_worker_id: workers.decode,
    server: serverBreakdown(nvTiming),
    error,
  });
  return { content, timing, error, stopped };
}

// --- rendering --------------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

const fmt = (x, unit, digits = 1) => (x === null || x === undefined ? "—" : `${x.toFixed(digits)}${unit}`);

function metric(key, name, value, title) {
  return el("span", { class: "pg-metric", title, "data-metric": key }, el("span", { class: "pg-metric-name", text: name }),
    el("span", { class: "pg-metric-value", text: value }));
}

function waterfall(server) {
  const total = server.total_ms;
  if (!total) return null;
  const rows = [
    ["queue", 0, server.queue_ms || 0, "waiting for a prefill worker"],
    ["prefill", server.queue_ms || 0, server.prefill_ms || 0, "prefill on the prefill worker"],
    ["KV transfer", server.ttft_ms || 0, server.kv_transfer_ms || 0,
      "KV cache to the decode worker (the frontend's estimate)"],
    ["decode", server.ttft_ms || 0, server.decode_ms || 0,
      "the frontend's first token to its last: the hand-off to the decode worker, then decode"],
  ];
  const box = el("div", { class: "pg-waterfall", "data-role": "waterfall",
                           "aria-label": `server-side timing, ${total.toFixed(1)} ms in all` });
  for (const [label, startMs, ms, title] of rows) {
    const bar = el("span", { class: `pg-bar pg-bar-${label.split(" ")[0].toLowerCase()}` });
    bar.style.left = `${Math.min(100, (startMs / total) * 100)}%`;
    bar.style.width = `${Math.max(0.5, Math.min(100, (ms / total) * 100))}%`;
    box.append(el("div", { class: "pg-wf-row", title },
      el("span", { class: "pg-wf-label", text: label }),
      el("span", { class: "pg-wf-track" }, bar),
      el("span", { class: "pg-wf-ms", text: fmt(ms, " ms") })));
  }
  return box;
}

function renderTiming(box, timing) {
  box.replaceChildren();
  const line = el("div", { class: "pg-metrics", "data-role": "metrics" },
    metric("ttft", "TTFT", fmt(timing.ttft_ms, " ms"), "request sent → first content, measured in this browser"),
    metric("itl_mean", "ITL mean", fmt(timing.itl_mean_ms, " ms", 2), "mean gap between content events"),
    metric("itl_p90", "ITL p90", fmt(timing.itl_p90_ms, " ms", 2), "90th percentile gap between content events"),
    metric("tokens_per_s", "tok/s", fmt(timing.tokens_per_s, "", 1), "decode rate: completion tokens after the first, per second"),
    metric("prompt_tokens", "prompt", timing.prompt_tokens === null || timing.prompt_tokens === undefined ? "—" :
      String(timing.prompt_tokens), "prompt tokens (usage)"),
    metric("completion_tokens", "completion", timing.completion_tokens === null || timing.completion_tokens === undefined ? "—" :
      String(timing.completion_tokens), "completion tokens (usage)"));
  box.append(line);
  if (timing.prefill_worker_id || timing.decode_worker_id) {
    box.append(el("div", { class: "pg-workers small", "data-role": "workers" },
      el("span", { text: "prefill worker " }), el("code", { text: timing.prefill_worker_id || "—" }),
      el("span", { text: " → decode worker " }), el("code", { text: timing.decode_worker_id || "—" })));
  }
  if (timing.server) box.append(waterfall(timing.server) || "");
  if (timing.finish_reason === "stopped") box.append(el("div", { class: "muted small", text: "Stopped." }));
}

function copyButtons(box, snippets) {
  const out = el("pre", { class: "pg-snippet", hidden: "" });
  for (const [label, make] of snippets) {
    const button = el("button", { type: "button", class: "link small", text: label });
    button.addEventListener("click", async () => {
      const text = make();
      out.textContent = text;
      try {
        await navigator.clipboard.writeText(text);
        button.textContent = "Copied";
        setTimeout(() => { button.textContent = label; }, 1500);
        out.hidden = true;
      } catch {
        out.hidden = false; // no clipboard (plain http): show it to copy by hand
      }
    });
    box.append(button);
  }
  box.append(out);
}

// --- a chat column: one graph, its transcript, its history ------------------------------------

class ChatColumn {
  constructor(root, graphSelect, apiTemplate) {
    this.root = root;
    this.transcript = root.querySelector('[data-role="transcript"]');
    this.graphSelect = graphSelect;
    this.apiTemplate = apiTemplate;
    this.messages = []; // {role, content, timing}
  }

  get graph() { return this.graphSelect.value; }

  get model() { return this.graphSelect.selectedOptions[0]?.dataset.model || ""; }

  clear() {
    this.messages = [];
    this.transcript.replaceChildren();
  }

  bubble(role, text, who = this.graph) {
    const hint = this.transcript.querySelector('[data-role="hint"]');
    if (hint) hint.remove();
    const body = el("div", { class: "pg-text", text });
    const node = el("div", { class: `pg-msg pg-${role}`, "data-role": `msg-${role}` },
      el("div", { class: "pg-who", text: role === "user" ? "You" : who }), body);
    this.transcript.append(node);
    return { node, body };
  }

  showReply(node, timing, request) {
    const box = el("div", { class: "pg-timing", "data-role": "timing" });
    if (timing.error) node.append(el("div", { class: "error", "data-role": "error", text: timing.error }));
    renderTiming(box, timing);
    if (request) {
      const tools = el("div", { class: "pg-tools" });
      const origin = window.location.origin;
      copyButtons(tools, [["Copy as curl", () => curlSnippet(origin, request.graph, request.body)],
        ["Copy as Python", () => pythonSnippet(origin, request.graph, request.body)]]);
      box.append(tools);
    }
    node.append(box);
  }

  load(messages, graph) {
    this.clear();
    for (const m of messages) {
      const { node } = this.bubble(m.role, m.content, graph);
      if (m.role === "assistant" && m.timing) this.showReply(node, m.timing, null);
      this.messages.push(m);
    }
  }

  requestBody(settings) {
    const history = this.messages.filter((m) => m.content).map((m) => ({ role: m.role, content: m.content }));
    const body = { model: this.model, messages: [], stream: true, stream_options: { include_usage: true } };
    if (settings.system_prompt) body.messages.push({ role: "system", content: settings.system_prompt });
    body.messages.push(...history);
    for (const key of ["temperature", "top_p", "max_tokens"]) if (settings[key] !== null) body[key] = settings[key];
    if (settings.stop.length) body.stop = settings.stop;
    if (settings.nvext) body.nvext = { extra_fields: ["worker_id", "timing"] };
    return body;
  }

  async send(prompt, settings, signal) {
    this.messages.push({ role: "user", content: prompt, timing: null });
    this.bubble("user", prompt);
    const body = this.requestBody(settings);
    const graph = this.graph;
    const { node, body: textNode } = this.bubble("assistant", "");
    node.classList.add("pg-streaming");
    const url = this.apiTemplate.replace("GRAPH", encodeURIComponent(graph));
    const result = await streamChat(url, body, {
      signal, onDelta: (piece) => { textNode.textContent += piece; },
    });
    node.classList.remove("pg-streaming");
    this.messages.push({ role: "assistant", content: result.content, timing: result.timing });
    this.showReply(node, result.timing, { graph, body });
    node.scrollIntoView({ block: "end" });
    return result;
  }
}

// --- pages ------------------------------------------------------------------------------------

function readSettings(form) {
  const number = (name) => {
    const v = form.elements[name]?.value;
    return v === undefined || v === "" ? null : Number(v);
  };
  return {
    system_prompt: form.elements.system_prompt.value.trim(),
    temperature: number("temperature"),
    top_p: number("top_p"),
    max_tokens: number("max_tokens"),
    stop: form.elements.stop.value.split("\n").filter((s) => s.length).slice(0, 4),
    nvext: form.elements.nvext.checked,
  };
}

function writeSettings(form, conversation) {
  form.elements.system_prompt.value = conversation.system_prompt || "";
  const params = conversation.params || {};
  for (const key of ["temperature", "top_p", "max_tokens"]) if (params[key] !== undefined) form.elements[key].value = params[key];
  form.elements.stop.value = (params.stop || []).join("\n");
  if (form.elements.title) form.elements.title.value = conversation.title || "";
}

function wireComposer(root, { onSend, onStop }) {
  const composer = root.querySelector('[data-role="composer"]');
  const send = composer.querySelector('[data-role="send"]');
  const stop = composer.querySelector('[data-role="stop"]');
  const prompt = composer.elements.prompt;
  let busy = false;
  composer.addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = prompt.value.trim();
    if (!text || busy) return;
    busy = true;
    send.disabled = true;
    stop.disabled = false;
    prompt.value = "";
    try {
      await onSend(text);
    } finally {
      busy = false;
      send.disabled = false;
      stop.disabled = true;
      prompt.focus();
    }
  });
  prompt.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      composer.requestSubmit();
    }
  });
  stop.addEventListener("click", onStop);
}

async function postJSON(url, data) {
  const response = await fetch(url, {
    method: "POST", credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken() },
    body: JSON.stringify(data),
  });
  const payload = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(payload.error?.message || response.statusText);
  return payload;
}

function initChat(root) {
  const form = root.querySelector('[data-role="settings"]');
  const graphSelect = form.querySelector('[data-role="graph"]');
  const column = new ChatColumn(root.querySelector(".pg-chat"), graphSelect, root.dataset.api);
  const kept = root.querySelector('[data-role="kept"]');
  let saveUrl = null;
  let controller = null;

  const snapshot = () => {
    const s = readSettings(form);
    return {
      graph: column.graph, title: form.elements.title.value.trim(), system_prompt: s.system_prompt,
      params: { temperature: s.temperature, top_p: s.top_p, max_tokens: s.max_tokens, stop: s.stop },
      messages: column.messages,
    };
  };
  const save = async () => {
    try {
      const out = await postJSON(saveUrl || root.dataset.createUrl, snapshot());
      saveUrl = out.save_url;
      form.elements.title.value = out.title;
      kept.textContent = `Kept as “${out.title}”; every reply is saved.`;
      window.history.replaceState(null, "", out.url);
    } catch (exc) {
      kept.textContent = `Not saved: ${exc.message}`;
    }
  };

  const stored = document.getElementById("pg-conversation");
  const conversation = stored ? JSON.parse(stored.textContent) : null;
  if (conversation) {
    writeSettings(form, conversation);
    if ([...graphSelect.options].some((o) => o.value === conversation.graph)) graphSelect.value = conversation.graph;
    else kept.textContent = `Graph ${conversation.graph} is not serving: new replies go to ${graphSelect.value}.`;
    column.load(conversation.messages, conversation.graph);
    saveUrl = conversation.save_url;
    if (!kept.textContent) kept.textContent = `Kept as “${conversation.title}”; every reply is saved.`;
  }

  wireComposer(root, {
    onSend: async (text) => {
      controller = new AbortController();
      await column.send(text, readSettings(form), controller.signal);
      controller = null;
      if (saveUrl) await save();
    },
    onStop: () => controller && controller.abort(),
  });
  root.querySelector('[data-role="keep"]').addEventListener("click", save);
  root.querySelector('[data-role="new"]').addEventListener("click", () => {
    if (controller) controller.abort();
    column.clear();
    saveUrl = null;
    kept.textContent = "";
    form.elements.title.value = "";
    window.history.replaceState(null, "", window.location.pathname);
  });
}

function initCompare(root) {
  const form = root.querySelector('[data-role="settings"]');
  const columns = [...root.querySelectorAll("[data-column]")].map(
    (node) => new ChatColumn(node, node.querySelector('[data-role="graph"]'), root.dataset.api));
  let controllers = [];
  wireComposer(root, {
    onSend: async (text) => {
      const settings = readSettings(form);
      controllers = columns.map(() => new AbortController());
      await Promise.all(columns.map((c, i) => c.send(text, settings, controllers[i].signal)));
      controllers = [];
    },
    onStop: () => controllers.forEach((c) => c.abort()),
  });
  root.querySelector('[data-role="new"]').addEventListener("click", () => columns.forEach((c) => c.clear()));
}

function init() {
  for (const root of document.querySelectorAll("[data-playground]")) {
    if (root.dataset.ready) continue;
    root.dataset.ready = "1";
    if (root.dataset.playground === "chat") initChat(root);
    else if (root.dataset.playground === "compare") initCompare(root);
  }
}

if (typeof document !== "undefined") {
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
}
