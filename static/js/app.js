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
// A form that hands something over as soon as the page is shown (the token for dynamo-cp login).
document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("form[data-autosubmit]").forEach((form) => form.submit());
});
