// The playground's pages (chat, side by side): transcripts, timings under every reply, the
// waterfall, copy buttons, kept conversations. An ES module with no inline script: the pages
// run under a strict CSP. The streaming and the arithmetic are in playground-stream.js.

import { csrfToken, curlSnippet, pythonSnippet, streamChat } from "./playground-stream.js";

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

function renderTiming(box, timing, option) {
  box.replaceChildren();
  const line = el("div", { class: "pg-metrics", "data-role": "metrics" },
    metric("ttft", "TTFT", fmt(timing.ttft_ms, " ms"), "request sent → first content, measured in this browser"),
    metric("itl_mean", "ITL mean", fmt(timing.itl_mean_ms, " ms", 2), "mean gap between content events"),
    metric("itl_p90", "ITL p90", fmt(timing.itl_p90_ms, " ms", 2), "90th percentile gap between content events"),
    metric("tokens_per_s", "tok/s", fmt(timing.tokens_per_s, "", 1), "decode rate: completion tokens after the first, per second"),
    metric("prompt_tokens", "prompt", timing.prompt_tokens === null || timing.prompt_tokens === undefined ? "—" :
      String(timing.prompt_tokens), "prompt tokens (usage)"),
    metric("completion_tokens", "completion", timing.completion_tokens === null || timing.completion_tokens === undefined ? "—" :
      String(timing.completion_tokens), "completion tokens (usage)"),
    metric("cached_tokens", "cached", timing.cached_tokens === null || timing.cached_tokens === undefined ? "—" :
      String(timing.cached_tokens), "prompt tokens served from the KV cache (usage.prompt_tokens_details.cached_tokens)"));
  box.append(line);
  if (timing.prefill_worker_id || timing.decode_worker_id) {
    // Pod names where the runtime reported them (the column's graph option, data-workers), else
    // Dynamo's ids.
    let pods = {};
    try { pods = JSON.parse((option && option.dataset.workers) || "{}"); } catch (_) { pods = {}; }
    const name = (id) => (id && pods[id]) || id || "—";
    box.append(el("div", { class: "pg-workers small", "data-role": "workers" },
      el("span", { text: "prefill " }), el("code", { text: name(timing.prefill_worker_id), title: timing.prefill_worker_id || "" }),
      el("span", { text: " → decode " }), el("code", { text: name(timing.decode_worker_id), title: timing.decode_worker_id || "" })));
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

  get simulated() { return this.graphSelect.selectedOptions[0]?.dataset.simulated || ""; }

  showReply(node, timing, request) {
    const box = el("div", { class: "pg-timing", "data-role": "timing" });
    if (timing.error) node.append(el("div", { class: "error", "data-role": "error", text: timing.error }));
    renderTiming(box, timing, this.graphSelect.selectedOptions[0]);
    // The reply and every number under it came from the engine the label names ("simulated with
    // Dynamo's mocker", "vLLM on CPU, random weights"), not the graph's own engine on a GPU.
    if (timing.simulated) box.prepend(el("span", { class: "sim-tag", "data-role": "simulated", title: timing.simulated,
                                                   text: timing.simulated.split(": ")[0] }));
    if (request) {
      const tools = el("div", { class: "pg-tools" });
      const origin = window.location.origin;
      // Through the cluster's gateway when the graph is exposed there (data-endpoint).
      const endpoint = [...this.graphSelect.options].find((o) => o.value === request.graph)?.dataset.endpoint || "";
      copyButtons(tools, [["Copy as curl", () => curlSnippet(origin, request.graph, request.body, endpoint)],
        ["Copy as Python", () => pythonSnippet(origin, request.graph, request.body, endpoint)]]);
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
    const simulated = this.simulated;
    const { node, body: textNode } = this.bubble("assistant", "");
    node.classList.add("pg-streaming");
    const url = this.apiTemplate.replace("GRAPH", encodeURIComponent(graph));
    const result = await streamChat(url, body, {
      signal, onDelta: (piece) => { textNode.textContent += piece; },
    });
    node.classList.remove("pg-streaming");
    if (simulated) result.timing.simulated = simulated;
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
