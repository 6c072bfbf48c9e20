// retrieval web pages: the duplicates page (groups, actions shown as a plan first then undoable, "Already have
// these?"). Plain JavaScript, no build; uses svgEl, baseName, csrfToken and request of app.js.
"use strict";

var DUP_KIND_LABEL = {exact: "exact copies", formats: "the same photograph in two formats", near: "near duplicates",
                      scene: "same scene"};
var DUP_MATCH_LABEL = {exact: "exact copy", formats: "same photograph, other format", near: "near duplicate",
                       scene: "same scene"};
var DUP_OTHER_LABEL = {formats: "other format (kept)", scene: "other photo"};
var DUP_TITLE = {move: "Move the extra copies", trash: "Move the extra copies to the trash",
                 link: "Replace the exact copies by links to their keepers"};
var DUP_DONE = {move: "moved", trash: "moved to the trash", link: "replaced by links"};

function dupJson(r) {
  return r.json().then(function (body) {
    if (!r.ok) { throw new Error(body && body.error ? body.error : ("HTTP " + r.status)); }
    return body;
  });
}

function dupPost(url, body) {
  return fetch(url, {method: "POST", body: JSON.stringify(body), credentials: "same-origin",
                     headers: {"Content-Type": "application/json", "X-CSRF-Token": csrfToken()}}).then(dupJson);
}

function dupEl(tag, attrs, text) {
  var e = document.createElement(tag);
  Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
  if (text !== undefined && text !== null) { e.textContent = text; }
  return e;
}

function dupSize(n) {
  if (n === null || n === undefined) { return "?"; }
  if (n >= 1e9) { return (n / 1e9).toFixed(1) + " GB"; }
  if (n >= 1e6) { return (n / 1e6).toFixed(1) + " MB"; }
  if (n >= 1e3) { return (n / 1e3).toFixed(1) + " kB"; }
  return n + " B";
}

function dupThumb(id, path) {
  return dupEl("img", {"class": "thumb", src: "/api/images/" + id + "/thumbnail?size=small", alt: baseName(path),
                       loading: "lazy"});
}

// the matched regions of a photo in its group's pairs: [x0, y0, x1, y1] in its own pixels
function dupRegions(group, im) {
  var out = [];
  (group.pairs || []).forEach(function (p) {
    if (!p.regions) { return; }
    if (p.a === im.id) { out.push(p.regions[0]); }
    if (p.b === im.id) { out.push(p.regions[1]); }
  });
  return out;
}

function dupFolder(path) {
  var i = Math.max(path.lastIndexOf("/"), path.lastIndexOf("\\"));
  return i > 0 ? path.slice(0, i) : path;
}

function dupPhoto(group, im, keep) {
  var fig = dupEl("figure", {"class": "dup-photo" + (im.keeper ? " keeper" : ""), "data-id": im.id,
                             "data-keeper": String(im.keeper)});
  var frame = dupEl("div", {"class": "frame"});
  frame.appendChild(dupThumb(im.id, im.path));
  if (group.kind === "scene" && im.width && im.height) {
    var svg = svgEl("svg", {viewBox: "0 0 " + im.width + " " + im.height, preserveAspectRatio: "none"});
    dupRegions(group, im).forEach(function (b) {
      svg.appendChild(svgEl("rect", {"class": "box region", x: b[0], y: b[1], width: Math.max(b[2] - b[0], 1),
                                     height: Math.max(b[3] - b[1], 1)}));
    });
    frame.appendChild(svg);
  }
  fig.appendChild(frame);
  var cap = dupEl("figcaption");
  cap.appendChild(dupEl("span", {"class": im.keeper ? "badge keeper-badge" : "badge extra-badge"},
                        im.keeper ? "keeper" : im.hard_link ? "hard link of the keeper (no space of its own)" :
                        DUP_OTHER_LABEL[group.kind] || "extra copy"));
  cap.appendChild(dupEl("span", {"class": "path", title: im.path}, " " + baseName(im.path)));
  cap.appendChild(dupEl("div", {"class": "folder", title: im.path}, dupFolder(im.path)));
  var facts = [(im.width && im.height) ? im.width + "\u00d7" + im.height : "? \u00d7 ?", dupSize(im.bytes),
               im.format || "?"];
  cap.appendChild(dupEl("div", {"class": "facts"}, facts.join(" \u00b7 ")));
  cap.appendChild(dupEl("div", {"class": "facts"}, (im.date ? im.date.replace("T", " ") : "no date") +
                        (im.camera ? " \u00b7 " + im.camera : "")));
  if (im.error) { cap.appendChild(dupEl("div", {"class": "no"}, im.error)); }
  if (!im.keeper && !DUP_OTHER_LABEL[group.kind] && keep) {
    var button = dupEl("button", {type: "button", "class": "keep-this"}, "Keep this one");
    button.addEventListener("click", function () { keep(group, im); });
    cap.appendChild(button);
  }
  fig.appendChild(cap);
  return fig;
}

function dupGroup(g, keep) {
  var sec = dupEl("section", {"class": "dup-group kind-" + g.kind, "data-group": g.group, "data-kind": g.kind});
  var head = dupEl("h2");
  var tick = dupEl("input", {type: "checkbox", "class": "dup-select", value: g.group,
                             title: "act on this group only (with the other groups ticked)"});
  head.appendChild(tick);
  head.appendChild(dupEl("span", {"class": "kind-label kind-" + g.kind}, DUP_KIND_LABEL[g.kind] || g.kind));
  head.appendChild(dupEl("span", null, " group " + g.group + ": " + g.images.length + " photos"));
  sec.appendChild(head);
  sec.appendChild(dupEl("p", {"class": "meta"}, "keeper: " + baseName(g.keeper_path) + " in " +
                        dupFolder(g.keeper_path) + " (" + g.keeper_reason + ")"));
  var row = dupEl("div", {"class": "dup-photos"});
  g.images.forEach(function (im) { row.appendChild(dupPhoto(g, im, keep)); });
  sec.appendChild(row);
  return sec;
}

function retrievalDuplicatesPage() {
  var status = document.getElementById("dup-status"), list = document.getElementById("dup-groups");
  var result = document.getElementById("dup-result"), dialog = document.getElementById("dup-dialog");
  var ask = document.getElementById("dup-ask-folder"), to = document.getElementById("dup-to");
  var summary = document.getElementById("dup-plan-summary"), lines = document.getElementById("dup-plan-lines");
  var confirmButton = document.getElementById("dup-confirm");
  var state = {generation: null, groups: [], action: null, body: null, keepers: {}};
  var body = document.body;

  // the user's keeper of a group (sent with the action: the server acts on the other photos)
  function keep(group, im) {
    state.keepers[group.group] = im.id;
    group.images.forEach(function (other) { other.keeper = other.id === im.id; });
    group.keeper_path = im.path;
    group.keeper_reason = "chosen by hand";
    var old = list.querySelector("section.dup-group[data-group='" + group.group + "']");
    list.replaceChild(dupGroup(group, keep), old);
    body.setAttribute("data-kept", String(im.id));
  }

  function load() {
    body.removeAttribute("data-groups");
    return fetch("/api/duplicates", {credentials: "same-origin"}).then(dupJson).then(function (res) {
      state.generation = res.generation;
      state.groups = res.groups;
      state.keepers = {};
      list.textContent = "";
      res.groups.forEach(function (g) { list.appendChild(dupGroup(g, keep)); });
      var n = {exact: 0, formats: 0, near: 0, scene: 0};
      res.groups.forEach(function (g) { n[g.kind] += 1; });
      status.textContent = res.groups.length ? res.groups.length + " groups: " + n.exact + " of exact copies, " +
        (n.formats ? n.formats + " of a photograph in two formats (RAW and JPEG, kept together), " : "") +
        n.near + " of near duplicates, " + n.scene + " of the same scene (generation " + res.generation + ")"
        : "No duplicates (generation " + res.generation + ").";
      body.setAttribute("data-groups", String(res.groups.length));
    }).catch(function (e) {
      status.textContent = "error: " + e.message;
      body.setAttribute("data-error", e.message);
    });
  }

  function actionBody(action) {
    var req = {action: action, generation: state.generation};
    if (Object.keys(state.keepers).length) { req.keepers = state.keepers; }
    var ticked = Array.prototype.map.call(document.querySelectorAll(".dup-select:checked"),
                                          function (c) { return Number(c.value); });
    if (ticked.length) {
      req.groups = ticked;
      req.kinds = action === "link" ? ["exact"] : state.groups.filter(function (g) {
        return ticked.indexOf(g.group) >= 0;
      }).map(function (g) { return g.kind; }).filter(function (k, i, a) { return a.indexOf(k) === i; });
    }
    return req;
  }

  function showPlan() {
    var req = actionBody(state.action);
    if (state.action === "move") {
      if (!to.value.trim()) { summary.textContent = "give the folder first"; return; }
      req.to = to.value.trim();
    }
    req.confirm = false;
    summary.textContent = "making the plan…";
    lines.textContent = "";
    confirmButton.disabled = true;
    dialog.removeAttribute("data-files");
    dupPost("/api/duplicates/action", req).then(function (res) {
      state.body = req;
      res.lines.forEach(function (ln) { lines.appendChild(dupEl("li", null, ln)); });
      summary.textContent = res.files ? res.files + " file" + (res.files === 1 ? "" : "s") + " (" +
        dupSize(res.bytes) + ") will be " + DUP_DONE[state.action] + (state.action === "move" ? " to " + req.to : "") +
        "; nothing changes until you confirm." : "Nothing to do: no file would be " + DUP_DONE[state.action] + ".";
      confirmButton.disabled = !res.files;
      dialog.setAttribute("data-files", String(res.files));
    }).catch(function (e) {
      summary.textContent = "error: " + e.message;
      dialog.setAttribute("data-error", e.message);
    });
  }

  function open(action) {
    state.action = action;
    document.getElementById("dup-dialog-title").textContent = DUP_TITLE[action];
    summary.textContent = "";
    lines.textContent = "";
    confirmButton.disabled = true;
    dialog.removeAttribute("data-files");
    dialog.removeAttribute("data-error");
    ask.hidden = action !== "move";
    dialog.showModal();
    if (action === "move") { to.focus(); } else { showPlan(); }
  }

  function showResult(text, plan) {
    result.hidden = false;
    result.textContent = "";
    result.appendChild(dupEl("span", null, text + " "));
    if (plan) {
      var undo = dupEl("button", {type: "button", id: "dup-undo"}, "Undo");
      undo.addEventListener("click", function () {
        undo.disabled = true;
        dupPost("/api/duplicates/undo", {plan: plan}).then(function (res) {
          var s = res.summary;
          showResult("Undone: " + s.restored + " files restored, " + s.skipped + " skipped, " + s.failed +
                     " failed.", null);
          body.setAttribute("data-undone", String(s.restored));
          return load();
        }).catch(function (e) { showResult("error: " + e.message, plan); body.setAttribute("data-error", e.message); });
      });
      result.appendChild(undo);
    }
  }

  confirmButton.addEventListener("click", function () {
    var req = Object.assign({}, state.body, {confirm: true});
    confirmButton.disabled = true;
    summary.textContent = "working…";
    dupPost("/api/duplicates/action", req).then(function (res) {
      dialog.close();
      var s = res.summary;
      showResult(s.done + " files " + DUP_DONE[res.action] + ", " + s.skipped + " skipped, " + s.failed +
                 " failed; " + s.freed + " (plan " + res.plan + ").", res.plan);
      body.setAttribute("data-done", String(s.done));
      return load();
    }).catch(function (e) {
      summary.textContent = "error: " + e.message;
      dialog.setAttribute("data-error", e.message);
    });
  });
  document.getElementById("dup-cancel").addEventListener("click", function () { dialog.close(); });
  document.getElementById("dup-show-plan").addEventListener("click", showPlan);
  to.addEventListener("keydown", function (ev) { if (ev.key === "Enter") { ev.preventDefault(); showPlan(); } });
  ["dup-move", "dup-trash", "dup-link"].forEach(function (id) {
    var b = document.getElementById(id);
    b.addEventListener("click", function () { open(b.dataset.action); });
  });

  // "Already have these?": uploaded photos checked against the index (not added)
  var files = document.getElementById("against-files"), out = document.getElementById("against-results");
  var astatus = document.getElementById("against-status");
  document.getElementById("against-form").addEventListener("submit", function (ev) {
    ev.preventDefault();
    if (!files.files.length) { astatus.textContent = "pick photos first"; return; }
    var fd = new FormData();
    Array.prototype.forEach.call(files.files, function (f) { fd.append("images", f); });
    astatus.textContent = "checking…";
    out.textContent = "";
    body.removeAttribute("data-against");
    request("POST", "/api/duplicates/against", fd).then(function (res) {
      res.results.forEach(function (r) {
        var item = dupEl("div", {"class": "against-item kind-" + (r.kind || "none"), "data-name": r.path,
                                 "data-kind": r.kind || ""});
        item.appendChild(dupEl("b", null, r.path));
        item.appendChild(dupEl("span", {"class": "kind-label kind-" + (r.kind || "none")},
                               r.kind ? DUP_MATCH_LABEL[r.kind] : r.error ? "unreadable" : "not in the index"));
        if (r.error) { item.appendChild(dupEl("span", {"class": "no"}, " " + r.error)); }
        var row = dupEl("div", {"class": "dup-photos"});
        r.matches.forEach(function (m) {
          var fig = dupEl("figure", {"class": "dup-photo match-" + m.kind, "data-id": m.id});
          var frame = dupEl("div", {"class": "frame"});
          frame.appendChild(dupThumb(m.id, m.path));
          fig.appendChild(frame);
          fig.appendChild(dupEl("figcaption", null, DUP_MATCH_LABEL[m.kind] + ": " + baseName(m.path)));
          row.appendChild(fig);
        });
        item.appendChild(row);
        out.appendChild(item);
      });
      var present = res.results.filter(function (r) { return r.kind; }).length;
      astatus.textContent = present + " of " + res.results.length + " photos are already in the index";
      body.setAttribute("data-against", String(res.results.length));
    }).catch(function (e) {
      astatus.textContent = "error: " + e.message;
      body.setAttribute("data-error", e.message);
    });
  });
  load();
}
