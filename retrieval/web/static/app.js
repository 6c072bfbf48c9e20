// retrieval web pages: box drawing, search, results with matched boxes, the match view. Plain JavaScript, no build.
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

// ---------------------------------------------------------------- the match view
function showMatch(section, fd, aHref, bHref) {
  section.hidden = false;
  section.textContent = "matching…";
  section.removeAttribute("data-lines");
  return postForm("/api/match", fd).then(function (m) {
    var H = 420, gap = 16;
    var wa = m.a.size[0], ha = m.a.size[1], wb = m.b.size[0], hb = m.b.size[1];
    var sa = H / ha, sb = H / hb, offB = wa * sa + gap, W = offB + wb * sb;
    var svg = svgEl("svg", {viewBox: "0 0 " + W + " " + H, "class": "matchview", width: "100%"});
    svg.appendChild(svgEl("image", {href: aHref, x: 0, y: 0, width: wa * sa, height: H, preserveAspectRatio: "none"}));
    svg.appendChild(svgEl("image", {href: bHref, x: offB, y: 0, width: wb * sb, height: H, preserveAspectRatio: "none"}));
    if (m.a.box) {
      var q = m.a.box;
      svg.appendChild(svgEl("rect", {"class": "qbox", x: q[0] * sa, y: q[1] * sa, width: (q[2] - q[0]) * sa,
                                     height: (q[3] - q[1]) * sa}));
    }
    if (m.box_in_b) {
      svg.appendChild(svgEl("polygon", {"class": "mbox", points: m.box_in_b.map(function (p) {
        return (offB + p[0] * sb) + "," + (p[1] * sb); }).join(" ")}));
    }
    for (var i = 0; i < m.points_a.length; i++) {
      var pa = m.points_a[i], pb = m.points_b[i];
      svg.appendChild(svgEl("line", {"class": "corr", x1: pa[0] * sa, y1: pa[1] * sa, x2: offB + pb[0] * sb,
                                     y2: pb[1] * sb}));
    }
    var cap = document.createElement("p");
    cap.className = "meta";
    cap.textContent = (m.verified ? "verified: " + m.inliers + " inliers" : "not verified (" + m.reason + ")") +
      " · " + m.tentative + " tentative matches · features " + m.n_features[0] + " / " + m.n_features[1] +
      " · " + baseName(m.b.path);
    var title = document.createElement("h2");
    title.textContent = "Match view: query (left) and result (right), inlier correspondences";
    section.textContent = "";
    section.appendChild(title);
    section.appendChild(cap);
    section.appendChild(svg);
    section.setAttribute("data-verified", String(m.verified));
    section.setAttribute("data-lines", String(m.points_a.length));
    return m;
  }).catch(function (e) { section.textContent = "error: " + e.message; section.setAttribute("data-error", e.message); });
}

function retrievalMatchPage() {
  var s = document.getElementById("match");
  var fd = new FormData();
  fd.append("a_id", s.dataset.a);
  fd.append("b_id", s.dataset.b);
  if (s.dataset.box) { fd.append("box", s.dataset.box); }
  showMatch(s, fd, "/api/images/" + s.dataset.a + "/thumbnail?size=large",
            "/api/images/" + s.dataset.b + "/thumbnail?size=large");
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
    state.file = f; state.id = null; state.box = null; state.fileUrl = URL.createObjectURL(f);
    img.onload = function () { state.w = img.naturalWidth; state.h = img.naturalHeight; render(); };
    img.src = state.fileUrl;
    img.hidden = false;
    var ph = document.getElementById("placeholder");
    if (ph) { ph.hidden = true; }
  });

  function queryHref() { return state.id ? "/api/images/" + state.id + "/thumbnail?size=large" : state.fileUrl; }

  function figure(hit, size) {
    var fig = document.createElement("figure");
    fig.className = "result" + (hit.verified ? " verified" : "");
    fig.dataset.id = hit.id; fig.dataset.path = hit.path; fig.dataset.rank = hit.rank;
    fig.dataset.verified = String(hit.verified);
    var frame = document.createElement("div");
    frame.className = "frame";
    var im = document.createElement("img");
    im.className = "thumb"; im.src = "/api/images/" + hit.id + "/thumbnail?size=small"; im.alt = baseName(hit.path);
    frame.appendChild(im);
    if (size) {
      var svg = svgEl("svg", {viewBox: "0 0 " + size[0] + " " + size[1], preserveAspectRatio: "none"});
      if (hit.verified && hit.box) {
        var b = hit.box;
        svg.appendChild(svgEl("rect", {"class": "box match", x: b[0], y: b[1], width: Math.max(b[2] - b[0], 1),
                                       height: Math.max(b[3] - b[1], 1)}));
      }
      frame.appendChild(svg);
    }
    var cap = document.createElement("figcaption");
    cap.innerHTML = "<b>#" + hit.rank + "</b> score " + hit.score.toFixed(4) + "<br>" +
      (hit.verified ? '<span class="ok">&#10003; verified, ' + hit.inliers + " inliers</span>"
                    : '<span class="no">not verified</span>') + "<br>";
    var p = document.createElement("span");
    p.className = "path"; p.textContent = hit.path; p.title = hit.path;
    cap.appendChild(p);
    fig.appendChild(frame); fig.appendChild(cap);
    fig.addEventListener("click", function () { openMatch(hit); });
    return fig;
  }

  var lastBox = null;

  function openMatch(hit) {
    if (state.id) {
      location.href = "/match?a=" + state.id + "&b=" + hit.id + (lastBox ? "&box=" + encodeURIComponent(lastBox) : "");
      return;
    }
    var fd = new FormData();
    fd.append("a_image", state.file); fd.append("b_id", hit.id);
    if (lastBox) { fd.append("box", lastBox); }
    showMatch(matchSection, fd, queryHref(), "/api/images/" + hit.id + "/thumbnail?size=large").then(function () {
      matchSection.scrollIntoView();
    });
  }

  document.getElementById("search").addEventListener("click", function () {
    if (!state.id && !state.file) { status.textContent = "pick or upload a photo first"; return; }
    var fd = new FormData();
    if (state.id) { fd.append("id", state.id); } else { fd.append("image", state.file); }
    lastBox = state.box ? boxString(state.box) : null;
    if (lastBox) { fd.append("box", lastBox); }
    fd.append("k", document.getElementById("k").value || "10");
    status.textContent = "searching…";
    results.textContent = "";
    document.body.removeAttribute("data-results");
    postForm("/api/search", fd).then(function (res) {
      res.hits.forEach(function (h) { results.appendChild(figure(h, res.sizes[String(h.id)])); });
      var nv = res.hits.filter(function (h) { return h.verified; }).length;
      status.textContent = res.hits.length + " results, " + nv + " verified, in " + res.seconds.toFixed(2) +
        " s (generation " + res.generation + "); click a result for the match view";
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
  if (page === "query") { retrievalQueryPage(); }
  if (page === "match") { retrievalMatchPage(); }
  if (page === "duplicates") { retrievalDuplicatesPage(); }   // static/duplicates.js, loaded by that page only
});
