// A <select data-autosubmit> submits its form when changed (the language switch). An external
// script, so the Content-Security-Policy needs no inline handlers.
document.addEventListener("change", function (event) {
  var field = event.target;
  if (field instanceof HTMLSelectElement && field.dataset.autosubmit !== undefined && field.form) {
    field.form.requestSubmit();
  }
});
