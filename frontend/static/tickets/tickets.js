// Inbox and ticket keyboard shortcuts (documented on the inbox page). No dependencies.
(function () {
  "use strict";
  function typing(el) {
    return el && (el.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(el.tagName));
  }
  function rows() { return Array.from(document.querySelectorAll("tr[data-ticket-row]")); }
  var current = -1;
  function highlight(i) {
    var all = rows();
    if (!all.length) return;
    current = Math.max(0, Math.min(all.length - 1, i));
    all.forEach(function (r, n) { r.classList.toggle("is-current", n === current); });
    all[current].scrollIntoView({ block: "nearest" });
  }
  function bulk(action) {
    var form = document.getElementById("bulk-form");
    if (!form || !form.querySelector("input[name=ticket]:checked")) return;
    form.querySelector("#bulk-action").value = action;
    form.requestSubmit();
  }
  document.addEventListener("keydown", function (e) {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey) && typing(e.target)) {
      var form = e.target.closest("form[data-ctrl-enter]");
      if (form) { e.preventDefault(); form.requestSubmit(); }
      return;
    }
    if (typing(e.target) || e.ctrlKey || e.metaKey || e.altKey) return;
    var all = rows();
    switch (e.key) {
      case "j": highlight(current + 1); break;
      case "k": highlight(current - 1); break;
      case "o": case "Enter":
        if (current >= 0 && all[current]) { window.location = all[current].dataset.href; } else return;
        break;
      case "x":
        if (current >= 0 && all[current]) {
          var box = all[current].querySelector("input[type=checkbox]");
          box.checked = !box.checked;
        }
        break;
      case "a": bulk("assign_me"); break;
      case "s": bulk("solved"); break;
      case "/": var s = document.getElementById("inbox-search"); if (s) s.focus(); else return; break;
      case "r": var r = document.getElementById("id_body"); if (r) r.focus(); else return; break;
      case "n": var n = document.getElementById("id_note"); if (n) n.focus(); else return; break;
      default: return;
    }
    e.preventDefault();
  });
  document.addEventListener("change", function (e) {
    if (e.target.matches("[data-select-all]")) {
      document.querySelectorAll("#bulk-form input[name=ticket]").forEach(function (b) {
        b.checked = e.target.checked;
      });
    }
  });
  document.addEventListener("htmx:afterSwap", function () { current = -1; });
})();
