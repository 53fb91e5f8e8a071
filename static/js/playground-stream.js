// The playground's engine, without any DOM: read a chat's SSE stream through
// /api/playground/{graph}/v1/chat/completions, time the reply from the arrival of its events,
// and write the request as curl or Python. playground.js builds the pages on it; the tests
// import it directly.
//
// The numbers follow tests/playground_timing.py (the tests hold the two together):
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

// The OpenAI base URL of a graph: its cluster gateway's (``endpoint``) when it is exposed
// there, else the control plane's relay.
export function openaiBase(origin, graph, endpoint = "") {
  return endpoint || `${origin}/api/playground/${encodeURIComponent(graph)}/v1`;
}

export function curlSnippet(origin, graph, body, endpoint = "") {
  const url = `${openaiBase(origin, graph, endpoint)}/chat/completions`;
  return [
    `curl -N ${shellQuote(url)} \\`,
    `  -H "Authorization: Token $DYNAMO_CP_TOKEN" \\`,
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

export function pythonSnippet(origin, graph, body, endpoint = "") {
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
    `    base_url=${JSON.stringify(openaiBase(origin, graph, endpoint))},`,
    '    api_key=os.environ["DYNAMO_CP_TOKEN"],  # your control-plane API token',
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

export function csrfToken() {
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
    // Prompt tokens the engine found in its KV cache (a prefix hit, what KV routing aims at).
    cached_tokens: usage && usage.prompt_tokens_details && Number.isInteger(usage.prompt_tokens_details.cached_tokens)
      ? usage.prompt_tokens_details.cached_tokens : null,
    finish_reason: stopped ? "stopped" : finishReason,
    prefill_worker_id: workers.prefill,
    decode_worker_id: workers.decode,
    server: serverBreakdown(nvTiming),
    error,
  });
  return { content, timing, error, stopped };
}
