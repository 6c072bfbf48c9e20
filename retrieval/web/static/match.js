// retrieval web pages: the match view (query on the left, result on the right, inlier correspondences), each
// drawing kept inside its own photo. Plain JavaScript, no build; uses svgEl, baseName and postForm of app.js.
"use strict";

var matchViews = 0;

// The part of the segment p-q inside rect [x0, y0, x1, y1] (Liang-Barsky), or null.
function clipSegment(p, q, r) {
  var dx = q[0] - p[0], dy = q[1] - p[1], t0 = 0, t1 = 1;
  var checks = [[-dx, p[0] - r[0]], [dx, r[2] - p[0]], [-dy, p[1] - r[1]], [dy, r[3] - p[1]]];
  for (var i = 0; i < 4; i++) {
    var den = checks[i][0], num = checks[i][1];
    if (den === 0) {
      if (num < 0) { return null; }
    } else {
      var t = num / den;
      if (den < 0) { if (t > t1) { return null; } if (t > t0) { t0 = t; } }
      else { if (t < t0) { return null; } if (t < t1) { t1 = t; } }
    }
  }
  return [[p[0] + t0 * dx, p[1] + t0 * dy], [p[0] + t1 * dx, p[1] + t1 * dy]];
}

// The polygon pts cut to rect [x0, y0, x1, y1] (Sutherland-Hodgman): the region of pts that lies in the rect.
function clipPolygon(pts, r) {
  var edges = [[0, r[0], 1], [0, r[2], -1], [1, r[1], 1], [1, r[3], -1]];
  var out = pts.slice();
  edges.forEach(function (e) {
    var axis = e[0], lim = e[1], sign = e[2], input = out;
    out = [];
    function inside(p) { return sign * (p[axis] - lim) >= 0; }
    function cross(a, b) {
      var t = (lim - a[axis]) / (b[axis] - a[axis]);
      return [a[0] + t * (b[0] - a[0]), a[1] + t * (b[1] - a[1])];
    }
    for (var i = 0; i < input.length; i++) {
      var cur = input[i], prev = input[(i + input.length - 1) % input.length];
      if (inside(cur)) {
        if (!inside(prev)) { out.push(cross(prev, cur)); }
        out.push(cur);
      } else if (inside(prev)) {
        out.push(cross(prev, cur));
      }
    }
  });
  return out;
}

function finitePoint(p) { return p && isFinite(p[0]) && isFinite(p[1]); }

// Draw a match record m (POST /api/match) into svg: photo a in panel pa, photo b in panel pb ([x0, y0, x1, y1] in
// the svg's units), sa / sb the scales from original pixels to the panels.
function drawMatch(svg, m, pa, pb, sa, sb, aHref, bHref) {
  var n = ++matchViews, defs = svgEl("defs");
  [["a", pa], ["b", pb]].forEach(function (x) {
    var cp = svgEl("clipPath", {id: "panel-" + x[0] + "-" + n});
    cp.appendChild(svgEl("rect", {x: x[1][0], y: x[1][1], width: x[1][2] - x[1][0], height: x[1][3] - x[1][1]}));
    defs.appendChild(cp);
  });
  svg.appendChild(defs);
  var ga = svgEl("g", {"class": "panel panel-a", "clip-path": "url(#panel-a-" + n + ")"});
  var gb = svgEl("g", {"class": "panel panel-b", "clip-path": "url(#panel-b-" + n + ")"});
  ga.appendChild(svgEl("image", {href: aHref, x: pa[0], y: pa[1], width: pa[2] - pa[0], height: pa[3] - pa[1],
                                 preserveAspectRatio: "none", "class": "photo-a"}));
  gb.appendChild(svgEl("image", {href: bHref, x: pb[0], y: pb[1], width: pb[2] - pb[0], height: pb[3] - pb[1],
                                 preserveAspectRatio: "none", "class": "photo-b"}));
  if (m.a.box) {   // the query box, inside photo a
    var q = m.a.box, x0 = Math.max(pa[0], pa[0] + q[0] * sa), y0 = Math.max(pa[1], pa[1] + q[1] * sa);
    var x1 = Math.min(pa[2], pa[0] + q[2] * sa), y1 = Math.min(pa[3], pa[1] + q[3] * sa);
    if (x1 > x0 && y1 > y0) {
      ga.appendChild(svgEl("rect", {"class": "qbox", x: x0, y: y0, width: x1 - x0, height: y1 - y0}));
    }
  }
  if (m.box_in_b && m.box_in_b.every(finitePoint)) {   // the query box projected into b: only its part inside b
    var pts = m.box_in_b.map(function (p) { return [pb[0] + p[0] * sb, pb[1] + p[1] * sb]; });
    var region = clipPolygon(pts, pb);
    if (region.length >= 3) {
      gb.appendChild(svgEl("polygon", {"class": "mbox", points: region.map(function (p) {
        return p[0].toFixed(2) + "," + p[1].toFixed(2); }).join(" ")}));
    }
    var d = "";
    for (var i = 0; i < pts.length; i++) {
      var s = clipSegment(pts[i], pts[(i + 1) % pts.length], pb);
      if (s) { d += "M" + s[0][0].toFixed(2) + "," + s[0][1].toFixed(2) + "L" + s[1][0].toFixed(2) + "," + s[1][1].toFixed(2); }
    }
    if (d) { gb.appendChild(svgEl("path", {"class": "mbox-edge", d: d})); }
  }
  svg.appendChild(ga);
  svg.appendChild(gb);
  var lines = svgEl("g", {"class": "correspondences"});
  for (var j = 0; j < m.points_a.length; j++) {
    var a = m.points_a[j], b = m.points_b[j];
    var ax = Math.min(Math.max(pa[0] + a[0] * sa, pa[0]), pa[2]), ay = Math.min(Math.max(pa[1] + a[1] * sa, pa[1]), pa[3]);
    var bx = Math.min(Math.max(pb[0] + b[0] * sb, pb[0]), pb[2]), by = Math.min(Math.max(pb[1] + b[1] * sb, pb[1]), pb[3]);
    lines.appendChild(svgEl("line", {"class": "corr", x1: ax, y1: ay, x2: bx, y2: by}));
  }
  svg.appendChild(lines);
}

// Fetch the match of form fd and show it in section; nav: {prev, next, close} callbacks (buttons of the viewer).
function showMatch(section, fd, aHref, bHref, nav) {
  section.hidden = false;
  section.textContent = "matching…";
  section.removeAttribute("data-lines");
  section.removeAttribute("data-error");
  return postForm("/api/match", fd).then(function (m) {
    var H = 420, gap = 16;
    var wa = m.a.size[0], ha = m.a.size[1], wb = m.b.size[0], hb = m.b.size[1];
    var sa = H / ha, sb = H / hb, offB = wa * sa + gap, W = offB + wb * sb;
    var svg = svgEl("svg", {viewBox: "0 0 " + W + " " + H, "class": "matchview", width: "100%"});
    drawMatch(svg, m, [0, 0, wa * sa, H], [offB, 0, W, H], sa, sb, aHref, bHref);
    var cap = document.createElement("p");
    cap.className = "meta";
    cap.textContent = (m.verified ? "verified: " + m.inliers + " inliers" : "not verified (" + m.reason + ")") +
      " · " + m.tentative + " tentative matches · features " + m.n_features[0] + " / " + m.n_features[1] +
      " · " + baseName(m.b.path) + " · ";
    var orig = document.createElement("a");
    orig.href = "/api/images/" + m.b.id + "/original";
    orig.target = "_blank"; orig.rel = "noopener"; orig.textContent = "open the original";
    cap.appendChild(orig);
    var head = document.createElement("div");
    head.className = "viewer-head";
    var title = document.createElement("h2");
    title.textContent = "Match view: query (left) and result (right), inlier correspondences";
    head.appendChild(title);
    if (nav) {
      [["prev", "← previous", "k or ←"], ["next", "next →", "j or →"], ["close", "close ×", "Esc"]].forEach(function (b) {
        var btn = document.createElement("button");
        btn.type = "button"; btn.className = "viewer-" + b[0]; btn.textContent = b[1]; btn.title = b[2];
        btn.disabled = !nav[b[0]];
        btn.addEventListener("click", function () { nav[b[0]](); });
        head.appendChild(btn);
      });
    }
    section.textContent = "";
    section.appendChild(head);
    section.appendChild(cap);
    section.appendChild(svg);
    section.setAttribute("data-b", String(m.b.id));
    section.setAttribute("data-verified", String(m.verified));
    section.setAttribute("data-lines", String(m.points_a.length));
    return m;
  }).catch(function (e) { section.textContent = "error: " + e.message; section.setAttribute("data-error", e.message); });
}

// The /match page: next / previous result with j k ← → (the ranked list the query page kept), Esc back to the query.
function retrievalMatchPage() {
  var s = document.getElementById("match");
  var fd = new FormData();
  fd.append("a_id", s.dataset.a);
  fd.append("b_id", s.dataset.b);
  if (s.dataset.box) { fd.append("box", s.dataset.box); }
  var kept = null;
  try { kept = JSON.parse(sessionStorage.getItem("retrieval:results") || "null"); } catch (e) { kept = null; }
  var ids = kept && String(kept.a) === s.dataset.a && (kept.box || "") === s.dataset.box ? kept.ids : [];
  var at = ids.indexOf(Number(s.dataset.b));

  function go(step) {
    var to = at < 0 ? -1 : at + step;
    if (to < 0 || to >= ids.length) { return; }
    location.href = "/match?a=" + s.dataset.a + "&b=" + ids[to] + (s.dataset.box ? "&box=" + encodeURIComponent(s.dataset.box) : "");
  }

  function back() { location.href = document.getElementById("back").getAttribute("href"); }
  showMatch(s, fd, "/api/images/" + s.dataset.a + "/thumbnail?size=large",
            "/api/images/" + s.dataset.b + "/thumbnail?size=large",
            {prev: at > 0 ? function () { go(-1); } : null, next: at >= 0 && at + 1 < ids.length ? function () { go(1); } : null,
             close: back});
  onKeys({next: function () { go(1); }, prev: function () { go(-1); }, close: back});
}
