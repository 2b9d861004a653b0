// Plain forms whose action has consequences ask first, naming them: <form data-confirm="…">
// (htmx requests use hx-confirm). An external script, so a strict CSP needs no inline code.
document.addEventListener("submit", function (event) {
  var form = event.target;
  if (!(form instanceof HTMLFormElement) || !form.dataset.confirm) { return; }
  if (!window.confirm(form.dataset.confirm)) { event.preventDefault(); }
}, true);
