// retrieval web pages: shared helpers, keys, the query page (box drawing, search, results with matched boxes; the
// match view of static/match.js opens over it). Plain JavaScript, no build.
"use strict";

var SVGNS = "http://www.w3.org/2000/svg";

function svgEl(name, attrs) {
  var el = document.createElementNS(SVGNS, name);
  Object.keys(attrs || {}).forEach(function (k) { el.setAttribute(k, attrs[k]); });
  return el;
}

function baseName(path) { return String(path).split("/").pop(); }

function csrfToken() {
  // the double-submit token: the server sets the cookie retrieval_csrf with each page; a write sends it back as a
  // header, which a page of another site cannot do
  var m = document.cookie.match(/(?:^|;\s*)retrieval_csrf=([^;]*)/);
  return m ? decodeURIComponent(m[1]) : "";
}

function request(method, url, fd) {
  return fetch(url, {method: method, body: fd, credentials: "same-origin",
                     headers: {"X-CSRF-Token": csrfToken()}}).then(function (r) {
    return r.json().then(function (body) {
      if (!r.ok) { throw new Error(body && body.error ? body.error : ("HTTP " + r.status)); }
      return body;
    });
  });
}

function postForm(url, fd) { return request("POST", url, fd); }

function boxString(b) { return b.map(function (v) { return v.toFixed(1); }).join(","); }

// ---------------------------------------------------------------- keys
// handlers: {next, prev, open, close, filter}; j / → next, k / ← previous, Enter open, Esc close, / filter. Keys typed
// in a text field are left alone (but Esc).
function onKeys(handlers) {
  document.addEventListener("keydown", function (ev) {
    if (ev.ctrlKey || ev.metaKey || ev.altKey || ev.defaultPrevented) { return; }
    var t = ev.target, typing = t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT" ||
                                      t.isContentEditable);
    var name = ev.key === "Escape" ? "close" : typing ? null :
      (ev.key === "j" || ev.key === "ArrowRight") ? "next" : (ev.key === "k" || ev.key === "ArrowLeft") ? "prev" :
      ev.key === "Enter" ? "open" : ev.key === "/" ? "filter" : null;
    if (!name || !handlers[name]) { return; }
    if (handlers[name](ev) !== false) { ev.preventDefault(); }
  });
}

// ---------------------------------------------------------------- the query page
function retrievalQueryPage() {
  var stage = document.getElementById("stage"), img = document.getElementById("qimg");
  var draw = document.getElementById("boxdraw"), boxtext = document.getElementById("boxtext");
  var status = document.getElementById("status"), results = document.getElementById("results");
  var matchSection = document.getElementById("match");
  var state = {id: stage.dataset.id || null, file: null, fileUrl: null,
               w: Number(stage.dataset.width) || 0, h: Number(stage.dataset.height) || 0, box: null};
  var drag = null;

  function scale() { return img.clientWidth ? state.w / img.clientWidth : 1; }

  function render() {
    if (!state.box) { draw.hidden = true; boxtext.textContent = "no box: the whole photo is the query"; return; }
    var s = scale(), b = state.box;
    draw.hidden = false;
    draw.style.left = (b[0] / s) + "px"; draw.style.top = (b[1] / s) + "px";
    draw.style.width = ((b[2] - b[0]) / s) + "px"; draw.style.height = ((b[3] - b[1]) / s) + "px";
    boxtext.textContent = "box " + b.map(function (v) { return Math.round(v); }).join(", ");
  }

  function point(ev) {
    var r = img.getBoundingClientRect(), s = scale();
    var x = Math.min(Math.max(ev.clientX - r.left, 0), r.width), y = Math.min(Math.max(ev.clientY - r.top, 0), r.height);
    return [x * s, y * s];
  }

  stage.addEventListener("mousedown", function (ev) {
    if (img.hidden || !state.w || ev.button !== 0) { return; }
    ev.preventDefault();
    var p = point(ev), b = state.box;
    if (b && p[0] >= b[0] && p[0] <= b[2] && p[1] >= b[1] && p[1] <= b[3]) {
      drag = {mode: "move", start: p, orig: b.slice()};
    } else {
      drag = {mode: "draw", start: p};
      state.box = [p[0], p[1], p[0], p[1]];
    }
    render();
  });
  document.addEventListener("mousemove", function (ev) {
    if (!drag) { return; }
    var p = point(ev);
    if (drag.mode === "draw") {
      state.box = [Math.min(drag.start[0], p[0]), Math.min(drag.start[1], p[1]),
                   Math.max(drag.start[0], p[0]), Math.max(drag.start[1], p[1])];
    } else {
      var o = drag.orig, dx = p[0] - drag.start[0], dy = p[1] - drag.start[1];
      dx = Math.min(Math.max(dx, -o[0]), state.w - o[2]);
      dy = Math.min(Math.max(dy, -o[1]), state.h - o[3]);
      state.box = [o[0] + dx, o[1] + dy, o[2] + dx, o[3] + dy];
    }
    render();
  });
  document.addEventListener("mouseup", function () {
    if (!drag) { return; }
    var b = state.box, s = scale();
    if (drag.mode === "draw" && b && ((b[2] - b[0]) / s < 4 || (b[3] - b[1]) / s < 4)) { state.box = null; }
    drag = null;
    render();
  });
  window.addEventListener("resize", render);
  document.getElementById("clear").addEventListener("click", function () { state.box = null; render(); });

  document.getElementById("upload").addEventListener("change", function (ev) {
    var f = ev.target.files[0];
    if (!f) { return; }
    if (state.fileUrl) { URL.revokeObjectURL(state.fileUrl); }
    state.file = f; state.id = null; state.box = null; state.w = state.h = 0; state.fileUrl = URL.createObjectURL(f);
    var ph = document.getElementById("placeholder");
    img.onload = function () {
      state.w = img.naturalWidth; state.h = img.naturalHeight; img.hidden = false;
      if (ph) { ph.hidden = true; }
      render();
    };
    img.onerror = function () {   // HEIC and other formats a browser does not draw: searched and added all the same
      img.hidden = true;
      if (ph) {
        ph.hidden = false;
        ph.textContent = f.name + ": this browser cannot show this file (no box can be drawn); it can be searched " +
          "with and added to the index all the same.";
      }
    };
    img.src = state.fileUrl;
    img.hidden = false;
    if (ph) { ph.hidden = true; }
  });

  function queryHref() { return state.id ? "/api/images/" + state.id + "/thumbnail?size=large" : state.fileUrl; }

  function figure(hit, size, where, index) {
    var fig = document.createElement("figure");
    fig.className = "result" + (hit.verified ? " verified" : "");
    fig.dataset.id = hit.id; fig.dataset.path = hit.path; fig.dataset.rank = hit.rank;
    fig.dataset.verified = String(hit.verified);
    fig.tabIndex = 0;
    var frame = document.createElement("div");
    frame.className = "frame";
    var im = document.createElement("img");
    im.className = "thumb"; im.src = "/api/images/" + hit.id + "/thumbnail?size=small"; im.alt = baseName(hit.path);
    frame.appendChild(im);
    if (size) {
      var svg = svgEl("svg", {viewBox: "0 0 " + size[0] + " " + size[1], preserveAspectRatio: "none"});
      if (hit.verified && hit.box) {   // the matched box, inside the photo
        var b = hit.box, x0 = Math.max(b[0], 0), y0 = Math.max(b[1], 0);
        var x1 = Math.min(b[2], size[0]), y1 = Math.min(b[3], size[1]);
        svg.appendChild(svgEl("rect", {"class": "box match", x: x0, y: y0, width: Math.max(x1 - x0, 1),
                                       height: Math.max(y1 - y0, 1)}));
      }
      frame.appendChild(svg);
    }
    var cap = document.createElement("figcaption");
    cap.innerHTML = "<b>#" + hit.rank + "</b> score " + hit.score.toFixed(4) + "<br>" +
      (hit.verified ? '<span class="ok">&#10003; verified, ' + hit.inliers + " inliers</span>"
                    : '<span class="no">not verified</span>') + "<br>";
    var p = document.createElement("span");
    p.className = "name"; p.textContent = baseName(hit.path); p.title = hit.path;
    cap.appendChild(p);
    if (where) {
      var f = document.createElement("span");
      f.className = "folder"; f.textContent = where;
      cap.appendChild(document.createElement("br"));
      cap.appendChild(f);
    }
    fig.appendChild(frame); fig.appendChild(cap);
    fig.addEventListener("click", function () { select(index); openMatch(index); });
    return fig;
  }

  // the results, the one selected (j k ← →) and the match view opened over the page (Enter; Esc closes it)
  var lastBox = null, hits = [], selected = -1, openAt = -1, pushed = false;

  function figures() { return results.querySelectorAll("figure.result"); }

  function select(i) {
    var figs = figures();
    if (!figs.length) { return; }
    i = Math.min(Math.max(i, 0), figs.length - 1);
    if (selected >= 0 && figs[selected]) { figs[selected].classList.remove("selected"); }
    selected = i;
    figs[i].classList.add("selected");
    if (openAt < 0) { figs[i].focus({preventScroll: true}); figs[i].scrollIntoView({block: "nearest"}); }
  }

  function matchUrl(hit) {
    return "/match?a=" + state.id + "&b=" + hit.id + (lastBox ? "&box=" + encodeURIComponent(lastBox) : "");
  }

  function openMatch(i) {
    if (i < 0 || i >= hits.length) { return; }
    var hit = hits[i], fd = new FormData();
    if (state.id) {
      fd.append("a_id", state.id);
      var url = matchUrl(hit);   // the address of this view (the /match page), Back closes it
      if (openAt < 0) { history.pushState({match: hit.id}, "", url); pushed = true; }
      else { history.replaceState({match: hit.id}, "", url); }
    } else {
      fd.append("a_image", state.file);
    }
    fd.append("b_id", hit.id);
    if (lastBox) { fd.append("box", lastBox); }
    openAt = i;
    select(i);
    document.body.classList.add("viewing");
    showMatch(matchSection, fd, queryHref(), "/api/images/" + hit.id + "/thumbnail?size=large",
              {prev: i > 0 ? function () { openMatch(openAt - 1); } : null,
               next: i + 1 < hits.length ? function () { openMatch(openAt + 1); } : null, close: closeMatch});
  }

  function hideMatch() {
    matchSection.hidden = true;
    matchSection.textContent = "";
    document.body.classList.remove("viewing");
    var was = openAt;
    openAt = -1;
    if (was >= 0) { select(was); }
  }

  function closeMatch() {
    if (openAt < 0) { return false; }
    if (pushed) { pushed = false; history.back(); } else { hideMatch(); }   // popstate hides it
  }

  window.addEventListener("popstate", function () { if (openAt >= 0) { pushed = false; hideMatch(); } });

  onKeys({
    next: function () { if (openAt >= 0) { openMatch(openAt + 1); } else if (hits.length) { select(selected + 1); } else { return false; } },
    prev: function () { if (openAt >= 0) { openMatch(openAt - 1); } else if (hits.length) { select(selected - 1); } else { return false; } },
    open: function (ev) {
      if (openAt >= 0 || selected < 0 || !ev.target.classList || !ev.target.classList.contains("result")) { return false; }
      openMatch(selected);
    },
    close: closeMatch
  });

  document.getElementById("search").addEventListener("click", function () {
    if (!state.id && !state.file) { status.textContent = "pick or upload a photo first"; return; }
    var fd = new FormData();
    if (state.id) { fd.append("id", state.id); } else { fd.append("image", state.file); }
    lastBox = state.box ? boxString(state.box) : null;
    if (lastBox) { fd.append("box", lastBox); }
    fd.append("k", document.getElementById("k").value || "10");
    var minSimilarity = document.getElementById("min-similarity").value;
    if (minSimilarity) { fd.append("min_similarity", minSimilarity); }
    var verifiedOnly = document.getElementById("verified-only").checked;
    if (verifiedOnly) { fd.append("verified_only", "true"); }
    status.textContent = "searching…";
    results.textContent = "";
    hits = []; selected = -1;
    document.body.removeAttribute("data-results");
    postForm("/api/search", fd).then(function (res) {
      hits = res.hits;
      res.hits.forEach(function (h, i) { results.appendChild(figure(h, res.sizes[String(h.id)], (res.folders || {})[String(h.id)], i)); });
      if (state.id) {   // for the /match page's next / previous
        sessionStorage.setItem("retrieval:results", JSON.stringify({a: state.id, box: lastBox || "",
                                                                    ids: res.hits.map(function (h) { return h.id; })}));
      }
      var nv = res.hits.filter(function (h) { return h.verified; }).length;
      status.textContent = (!res.hits.length && (minSimilarity || verifiedOnly) ?
        "Nothing similar: none of the best results is " + (verifiedOnly ? "verified" :
          "verified or at least " + minSimilarity + " similar") + " (" + res.seconds.toFixed(2) + " s)." :
        res.hits.length + " results, " + nv + " verified, in " + res.seconds.toFixed(2) +
        " s (generation " + res.generation + "); click a result (or j / k, then Enter) for the match view");
      document.body.setAttribute("data-results", String(res.hits.length));
    }).catch(function (e) {
      status.textContent = "error: " + e.message;
      document.body.setAttribute("data-error", e.message);
    });
  });
  // add the uploaded photo to the index, or remove the indexed one (each a new generation of the index)
  var addButton = document.getElementById("add"), removeButton = document.getElementById("remove");
  if (addButton) {
    addButton.addEventListener("click", function () {
      if (!state.file) { status.textContent = "upload a photo first"; return; }
      var fd = new FormData();
      fd.append("image", state.file);
      status.textContent = "adding…";
      postForm("/api/images", fd).then(function (res) {
        status.textContent = (res.added ? "added as id " : "already indexed as id ") + res.image.id;
        document.body.setAttribute("data-added", String(res.image.id));
      }).catch(function (e) {
        status.textContent = "error: " + e.message;
        document.body.setAttribute("data-error", e.message);
      });
    });
  }
  if (removeButton) {
    removeButton.addEventListener("click", function () {
      if (!state.id || !window.confirm("Remove this photo from the index? (an uploaded copy is deleted)")) { return; }
      request("DELETE", "/api/images/" + state.id).then(function (res) {
        status.textContent = "removed id " + res.removed + " (generation " + res.generation + ")";
        document.body.setAttribute("data-removed", String(res.removed));
      }).catch(function (e) {
        status.textContent = "error: " + e.message;
        document.body.setAttribute("data-error", e.message);
      });
    });
  }
  if (img.complete) { render(); } else { img.addEventListener("load", render); }
}

// ---------------------------------------------------------------- start: the page says which it is
document.addEventListener("DOMContentLoaded", function () {
  var page = document.body.dataset.page;
  if (page === "grid") { retrievalGridPage(); }                // static/grid.js
  if (page === "query") { retrievalQueryPage(); }
  if (page === "match") { retrievalMatchPage(); }              // static/match.js
  if (page === "duplicates") { retrievalDuplicatesPage(); }   // static/duplicates.js, loaded by that page only
});
