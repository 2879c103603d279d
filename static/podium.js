// Podium: the small amount of script the pages use. Everything it touches is already
// on the page as text rendered by the server, so every page reads the same without it.
//
// - <time datetime="..." data-local>: adds the moment in the viewer's own time zone.
// - [data-countdown="<ISO>"]: "in 5 h 12 min", counted down every second (corrected
//   for the viewer's clock error, measured against <body data-server-now>).
// - [data-live="<status.json url>"]: while the thing is unfinished, polls every 2 s
//   and updates the status, the timeline, the [data-field] texts and the
//   [data-progress] bar in place. Text only (textContent), never HTML from the server.
// - [data-confirm="question"] on a button: asks before the form is sent.
(function () {
  "use strict";

  var POLL_MS = 2000;
  var clockSkewMs = 0; // server time minus this browser's time

  // Durations, exactly as the server's podium.span() writes them.
  function span(seconds) {
    var whole = Math.max(0, Math.floor(seconds));
    var days = Math.floor(whole / 86400);
    var rest = whole % 86400;
    var hours = Math.floor(rest / 3600);
    rest %= 3600;
    var mins = Math.floor(rest / 60);
    var secs = rest % 60;
    if (days) return days + " d " + hours + " h";
    if (hours) return hours + " h " + mins + " min";
    if (mins) return mins + " min " + secs + " s";
    return secs + " s";
  }

  function now() {
    return Date.now() + clockSkewMs;
  }

  function pad(number) {
    return (number < 10 ? "0" : "") + number;
  }

  function zoneName(date) {
    try {
      var parts = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" }).formatToParts(date);
      for (var i = 0; i < parts.length; i++) {
        if (parts[i].type === "timeZoneName") return parts[i].value;
      }
    } catch (error) { /* an old browser: fall through */ }
    var offset = -date.getTimezoneOffset();
    var sign = offset >= 0 ? "+" : "-";
    offset = Math.abs(offset);
    return "UTC" + sign + pad(Math.floor(offset / 60)) + ":" + pad(offset % 60);
  }

  function viewerZone() {
    try {
      return Intl.DateTimeFormat().resolvedOptions().timeZone || "";
    } catch (error) {
      return "";
    }
  }

  // The viewer's own time next to each server-rendered KST/UTC time, unless the page
  // already shows their zone.
  function addLocalTimes(root) {
    var zone = viewerZone();
    if (zone === "Asia/Seoul" || zone === "UTC" || zone === "Etc/UTC") return;
    root.querySelectorAll("time[data-local]").forEach(function (el) {
      if (el.nextElementSibling && el.nextElementSibling.classList.contains("local-time")) return;
      var date = new Date(el.getAttribute("datetime"));
      if (isNaN(date.getTime())) return;
      var clock = pad(date.getHours()) + ":" + pad(date.getMinutes());
      var text = el.getAttribute("data-local") === "clock"
        ? clock
        : date.getFullYear() + "-" + pad(date.getMonth() + 1) + "-" + pad(date.getDate()) + " " + clock;
      var local = document.createElement("span");
      local.className = "local-time";
      local.textContent = text + " " + zoneName(date) + " your time";
      el.insertAdjacentElement("afterend", local);
    });
  }

  function tickCountdowns() {
    document.querySelectorAll("[data-countdown]").forEach(function (el) {
      var left = (Date.parse(el.getAttribute("data-countdown")) - now()) / 1000;
      el.textContent = left >= 1 ? "in " + span(left) : "now";
    });
  }

  function setStatus(root, status) {
    root.querySelectorAll('[data-field="status"]').forEach(function (el) {
      el.textContent = status;
      el.className = "status status-" + status;
    });
    root.querySelectorAll('[data-field="outcome"]').forEach(function (el) {
      el.className = "outcome outcome-" + status;
    });
    root.querySelectorAll("[data-show-status]").forEach(function (el) {
      el.hidden = el.getAttribute("data-show-status") !== status;
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
        if (el.textContent !== display[name]) el.textContent = display[name];
        if (el.tagName === "PRE" && atBottom) el.scrollTop = el.scrollHeight;
        if (el.hasAttribute("data-hide-empty")) el.hidden = !display[name];
      });
    });
  }

  function setProgress(root, data) {
    var phase = data.phase || {};
    var elapsed = phase.elapsed_s !== undefined ? phase.elapsed_s : data.elapsed_s;
    var cap = phase.cap_s !== undefined ? phase.cap_s : data.cap_s;
    root.querySelectorAll("[data-progress]").forEach(function (bar) {
      if (cap && elapsed !== null && elapsed !== undefined && !data.finished) {
        bar.max = cap;
        bar.value = Math.min(elapsed, cap);
        bar.hidden = false;
      } else {
        bar.hidden = true;
      }
    });
  }

  function finish(root) {
    root.setAttribute("data-finished", "");
    var note = root.querySelector(".live-note");
    if (note) {
      note.textContent = "Finished. ";
      var link = document.createElement("a");
      link.href = "";
      link.textContent = "Refresh for actions";
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
        setProgress(root, data);
        if (data.finished) finish(root);
        else window.setTimeout(function () { poll(root); }, POLL_MS);
      })
      .catch(function () {
        // A network blip: try again a little later rather than giving up.
        window.setTimeout(function () { poll(root); }, POLL_MS * 3);
      });
  }

  function askBeforeSending(event) {
    var button = event.target.closest("[data-confirm]");
    if (button && !window.confirm(button.getAttribute("data-confirm"))) event.preventDefault();
  }

  document.addEventListener("DOMContentLoaded", function () {
    var serverNow = Number(document.body.getAttribute("data-server-now"));
    if (serverNow) clockSkewMs = serverNow * 1000 - Date.now();
    addLocalTimes(document);
    // A log tail opens at its end, where the newest lines are.
    document.querySelectorAll("pre.log[data-field]").forEach(function (el) {
      el.scrollTop = el.scrollHeight;
    });
    if (document.querySelector("[data-countdown]")) {
      tickCountdowns();
      window.setInterval(tickCountdowns, 1000);
    }
    document.addEventListener("click", askBeforeSending);
    document.querySelectorAll("[data-live]").forEach(function (root) {
      if (!root.hasAttribute("data-finished")) {
        window.setTimeout(function () { poll(root); }, POLL_MS);
      }
    });
  });
})();
