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
