// htmx errors show a short message in place instead of nothing (or a whole error page).
document.addEventListener("htmx:responseError", function (event) {
  var target = event.detail.target;
  if (!target) { return; }
  var status = event.detail.xhr ? event.detail.xhr.status : 0;
  var note = document.createElement("span");
  note.className = "htmx-error";
  note.setAttribute("role", "alert");
  note.textContent = (document.documentElement.lang === "de"
    ? "Konnte nicht geladen werden (Fehler " + status + "). Bitte die Seite neu laden."
    : "Could not load this (error " + status + "). Please reload the page.");
  target.replaceChildren(note);
});
document.addEventListener("htmx:sendError", function (event) {
  var target = event.detail.target;
  if (!target) { return; }
  var note = document.createElement("span");
  note.className = "htmx-error";
  note.setAttribute("role", "alert");
  note.textContent = (document.documentElement.lang === "de"
    ? "Keine Verbindung zum Portal. Bitte später neu laden."
    : "No connection to the portal. Please reload later.");
  target.replaceChildren(note);
});
