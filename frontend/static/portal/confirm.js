// Plain forms whose action has consequences ask first, naming them: <form data-confirm="…">
// (htmx requests use hx-confirm). An external script, so a strict CSP needs no inline code.
document.addEventListener("submit", function (event) {
  var form = event.target;
  if (!(form instanceof HTMLFormElement) || !form.dataset.confirm) { return; }
  // What the browser can check first (a required reason left empty) is said before asking:
  // confirming an action that is then refused for a missing field helps nobody.
  if (!form.checkValidity()) { event.preventDefault(); form.reportValidity(); return; }
  if (!window.confirm(form.dataset.confirm)) { event.preventDefault(); }
}, true);
