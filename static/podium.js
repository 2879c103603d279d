// Podium: live status for unfinished environments and submissions.
// A page marks its live region with data-live="<status.json url>"; while the thing is
// unfinished, poll every 2 s and update the status, the timeline and the [data-field]
// texts in place. Text only (textContent), never HTML from the server.
(function () {
  "use strict";

  var POLL_MS = 2000;

  function setStatus(root, status) {
    root.querySelectorAll('[data-field="status"]').forEach(function (el) {
      el.textContent = status;
      el.className = "status status-" + status;
    });
  }

  function setTimeline(root, timeline) {
    var body = root.querySelector("[data-timeline]");
    if (!body) return;
    var rows = document.createDocumentFragment();
    timeline.forEach(function (event) {
      var tr = document.createElement("tr");
      var badge = document.createElement("span");
      badge.className = "status status-" + event.status;
      badge.textContent = event.status;
      [badge, event.at_display, event.note].forEach(function (value) {
        var td = document.createElement("td");
        if (typeof value === "string") td.textContent = value;
        else td.appendChild(value);
        tr.appendChild(td);
      });
      rows.appendChild(tr);
    });
    body.replaceChildren(rows);
  }

  function setFields(root, display) {
    Object.keys(display).forEach(function (name) {
      if (name === "status") return;
      root.querySelectorAll('[data-field="' + name + '"]').forEach(function (el) {
        var atBottom = el.scrollHeight - el.scrollTop - el.clientHeight < 8;
        el.textContent = display[name];
        if (el.tagName === "PRE" && atBottom) el.scrollTop = el.scrollHeight;
        if (name === "failure_reason") el.hidden = !display[name];
      });
    });
  }

  function finish(root) {
    root.setAttribute("data-finished", "");
    var note = root.querySelector(".live-note");
    if (note) {
      note.textContent = "Finished. ";
      var link = document.createElement("a");
      link.href = "";
      link.textContent = "refresh for actions";
      note.appendChild(link);
    }
  }

  function poll(root) {
    var url = root.getAttribute("data-live");
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.json();
      })
      .then(function (data) {
        setStatus(root, data.status);
        setTimeline(root, data.timeline || []);
        setFields(root, data.display || {});
        if (data.finished) finish(root);
        else window.setTimeout(function () { poll(root); }, POLL_MS);
      })
      .catch(function () {
        // A network blip: try again a little later rather than giving up.
        window.setTimeout(function () { poll(root); }, POLL_MS * 3);
      });
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-live]").forEach(function (root) {
      if (!root.hasAttribute("data-finished")) {
        window.setTimeout(function () { poll(root); }, POLL_MS);
      }
    });
  });
})();
