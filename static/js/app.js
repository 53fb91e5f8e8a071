// Small behaviours without inline handlers (the pages run under a strict CSP).
document.addEventListener("input", (event) => {
  const el = event.target;
  if (el.matches('input[type="range"]')) {
    const out = el.form && el.form.querySelector("output");
    if (out) out.value = el.value;
  }
});
document.addEventListener("submit", (event) => {
  const form = event.target;
  if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) event.preventDefault();
});
// A log that follows (data-follow names its checkbox): polled while the box is checked, and
// kept scrolled to its newest lines. Not an htmx trigger filter: those need eval, which the
// CSP forbids (htmx would refuse every poll).
document.addEventListener("htmx:beforeRequest", (event) => {
  const el = event.detail.elt;
  const box = el.dataset && el.dataset.follow ? document.querySelector(el.dataset.follow) : null;
  if (box && !box.checked) event.preventDefault();
});
function scrollFollowed(root) {
  root.querySelectorAll("[data-follow]").forEach((el) => {
    const box = document.querySelector(el.dataset.follow);
    if (box && box.checked) el.scrollTop = el.scrollHeight;
  });
}
document.addEventListener("htmx:afterSettle", (event) => scrollFollowed(event.detail.elt.parentElement || document));
document.addEventListener("DOMContentLoaded", () => scrollFollowed(document));
// A refusal the user cannot see is a bug. htmx swaps no 4xx/5xx answer by default, so:
// * our own partials (an HTML fragment, or a whole page aimed at <body>) carry their message
//   and are swapped like a success (the server's HX-Retarget/HX-Reswap say where);
// * anything else (a 403 page, JSON, plain text, a proxy's 502) becomes one line of text
//   next to the form or button that asked, and the next request from it clears that line.
function refusalText(body, type, status) {
  let text = "";
  if (type.includes("json")) {
    try {
      const data = JSON.parse(body);
      text = data.detail || Object.entries(data).map(([k, v]) => `${k}: ${[].concat(v).join(" ")}`).join("; ");
    } catch (_) { text = body; }
  } else if (type.includes("html")) {
    // Parsed, never inserted: only its text is shown.
    const doc = new DOMParser().parseFromString(body, "text/html");
    const el = doc.querySelector("[role=alert], .error, main") || doc.body;
    text = el ? el.textContent : "";
  } else {
    text = body;
  }
  text = (text || "").replace(/\s+/g, " ").trim().slice(0, 600);
  return text || `The server answered ${status} with no message.`;
}
function refusalAnchor(elt) {
  return (elt && (elt.closest("form") || elt)) || document.querySelector("main");
}
function showRefusal(elt, text) {
  const anchor = refusalAnchor(elt);
  let note = anchor.nextElementSibling;
  if (!note || !note.classList.contains("refusal")) {
    note = document.createElement("p");
    note.className = "error refusal";
    note.setAttribute("role", "alert");
    anchor.after(note);
  }
  note.textContent = text;
}
document.addEventListener("htmx:beforeSwap", (event) => {
  const d = event.detail;
  const status = d.xhr.status;
  // A session that ended while the page was open (signed out in another tab, expired): the
  // request was redirected to the sign-in page, which would be swapped into the page. Go there
  // instead, and come back to this page (not to the fragment asked for) once signed in.
  const login = "/login/";
  const answered = new URL(d.xhr.responseURL || location.href, location.href).pathname;
  const asked = new URL((d.requestConfig && d.requestConfig.path) || location.href, location.href).pathname;
  if (answered === login && asked !== login) {
    d.shouldSwap = false;
    location.assign(`${login}?next=${encodeURIComponent(location.pathname + location.search)}`);
    return;
  }
  if (status < 400) return;
  const type = d.xhr.getResponseHeader("Content-Type") || "";
  const body = d.serverResponse || "";
  const fullPage = /<html[\s>]/i.test(body.slice(0, 2000));
  if (type.includes("html") && (!fullPage || d.target === document.body)) {
    d.shouldSwap = true;
    d.isError = false;
    return;
  }
  d.shouldSwap = false;
  showRefusal(d.requestConfig && d.requestConfig.elt, refusalText(body, type, status));
});
document.addEventListener("htmx:sendError", (event) => {
  showRefusal(event.detail.elt, "The control plane did not answer (is the server running?). Nothing was changed.");
});
document.addEventListener("htmx:beforeRequest", (event) => {
  const anchor = refusalAnchor(event.detail.elt);
  const note = anchor && anchor.nextElementSibling;
  if (note && note.classList.contains("refusal")) note.remove();
});
// htmx checks a form's HTML constraints before it sends and, when one fails, sends nothing and
// says nothing: show the browser's own message on the field (forms whose server writes every
// message, like the create form's preview, opt out with novalidate).
document.addEventListener("htmx:validation:halted", (event) => {
  const form = event.detail.elt.closest("form") || event.detail.elt;
  if (form.reportValidity) form.reportValidity();
});
// A form that hands something over as soon as the page is shown (the token for dynamo-cp login).
document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("form[data-autosubmit]").forEach((form) => form.submit());
});
// A form answered with errors shows them where the eye is: the first field marked invalid (or
// the form's own error) is scrolled into view and focused, on a full page and after htmx swaps
// a page into <body>. A preview swap holds no fields, so it never moves the caret.
function revealFirstError(root) {
  const field = root.querySelector('form [aria-invalid="true"]');
  const target = field || root.querySelector("form .error");
  if (!target) return;
  target.scrollIntoView({ block: "center" });
  if (field) field.focus({ preventScroll: true });
}
document.addEventListener("DOMContentLoaded", () => revealFirstError(document));
document.addEventListener("htmx:afterSettle", (event) => {
  if (event.detail.elt === document.body) revealFirstError(document);
});
// A graph page's status and the graph list's rows are pushed (graphs/live.py: a stream says when
// they changed; what is pushed is marked data-pushed). While the stream is cut, and until it is
// back, or when the server says it cannot hold one ("end": a WSGI server), they are polled every
// 2 s instead.
let statusPoll = null;
function pollStatus() {
  if (statusPoll !== null) return;
  statusPoll = setInterval(() => {
    for (const pushed of document.querySelectorAll("[data-pushed]")) htmx.trigger(pushed, "status-poll");
  }, 2000);
}
document.addEventListener("htmx:sseError", pollStatus);
document.addEventListener("htmx:sseClose", (event) => {
  if (event.detail && event.detail.type === "message") pollStatus();
});
document.addEventListener("htmx:sseOpen", () => {
  if (statusPoll !== null) clearInterval(statusPoll);
  statusPoll = null;
});
