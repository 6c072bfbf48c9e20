// retrieval web pages: the photos page (folders, the filter narrowed as one types, keys). Plain JavaScript, no build;
// uses onKeys of app.js. Without JavaScript the page works the same through its links and its form.
"use strict";

function retrievalGridPage() {
  var form = document.getElementById("filter-form"), input = document.getElementById("filter");
  var asked = 0, timer = null;

  // the filter: the page of the server for the text typed (the same HTML as the form's answer), swapped in place
  function refresh() {
    var params = new URLSearchParams(new FormData(form));
    if (!params.get("q")) { params.delete("q"); }
    var url = "/?" + params.toString(), mine = ++asked;
    document.body.setAttribute("data-filtering", "1");
    fetch(url, {credentials: "same-origin"}).then(function (r) {
      if (!r.ok) { throw new Error("HTTP " + r.status); }
      return r.text();
    }).then(function (html) {
      if (mine !== asked) { return; }   // a later keystroke's answer wins
      var doc = new DOMParser().parseFromString(html, "text/html");
      var fresh = doc.getElementById("listing");
      if (fresh) { document.getElementById("listing").replaceWith(document.importNode(fresh, true)); }
      history.replaceState(null, "", url);
      document.body.setAttribute("data-filtered", params.get("q") || "");
      document.body.removeAttribute("data-filtering");
    }).catch(function () {
      if (mine === asked) { form.submit(); }   // let the server's page answer
    });
  }

  input.addEventListener("input", function () {
    clearTimeout(timer);
    timer = setTimeout(refresh, 200);
  });

  function tiles() { return Array.prototype.slice.call(document.querySelectorAll("#grid a.tile")); }

  function move(step) {
    var all = tiles();
    if (!all.length) { return false; }
    var at = all.indexOf(document.activeElement);
    var to = at < 0 ? (step > 0 ? 0 : all.length - 1) : Math.min(Math.max(at + step, 0), all.length - 1);
    all[to].focus();
    all[to].scrollIntoView({block: "nearest"});
  }

  onKeys({
    next: function () { return move(1); },
    prev: function () { return move(-1); },
    filter: function () { input.focus(); input.select(); },
    close: function (ev) {
      if (ev.target !== input) { return false; }
      if (input.value) { input.value = ""; clearTimeout(timer); refresh(); } else { input.blur(); }
    }
  });
}
