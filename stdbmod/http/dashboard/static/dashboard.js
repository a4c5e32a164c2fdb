// stdbmod dashboard: live refresh, confirmations, relative times. No dependencies, no inline code
// (the pages' Content-Security-Policy forbids it).
(function () {
  "use strict";
  var POLL_MS = 2000;
  var skew = 0; // server clock minus browser clock, from the page's data-now

  function readSkew(root) {
    var el = root.querySelector("[data-now]");
    if (el) skew = Number(el.getAttribute("data-now")) - Date.now();
  }

  function span(ms) {
    var s = Math.abs(ms) / 1000;
    if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + Math.floor(s % 60) + " s";
    if (s < 86400) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
    return Math.floor(s / 86400) + " d " + Math.floor((s % 86400) / 3600) + " h";
  }

  function tick() {
    var now = Date.now() + skew;
    document.querySelectorAll(".countdown[data-until]").forEach(function (el) {
      var left = Number(el.getAttribute("data-until")) - now;
      el.textContent = left > 0 ? span(left) : "expired " + span(left) + " ago";
      el.classList.toggle("expired", left <= 0);
    });
    document.querySelectorAll("[data-age]").forEach(function (el) {
      el.textContent = span(now - Number(el.getAttribute("data-age")));
    });
    document.querySelectorAll("time[data-ts]").forEach(function (el) {
      var d = Number(el.getAttribute("data-ts")) - now;
      el.title = (d > 0 ? "in " + span(d) : span(d) + " ago");
    });
  }

  // Every form that changes something asks first. Once a form is on its way the live part is
  // left alone, so a refresh cannot replace the form under the browser's submission.
  var leaving = false;
  document.addEventListener("submit", function (e) {
    var msg = e.target.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) { e.preventDefault(); return; }
    leaving = true;
  });

  // The live part: the server pushes the commit log's end over a WebSocket (/dashboard/live/socket)
  // each time a commit lands, and the page re-reads its live part when the end moved past the
  // version it shows. Where the socket cannot open, or closes, the page polls /dashboard/live
  // every POLL_MS until the socket opens again (tried again every few seconds).
  function live(section) {
    var version = section.getAttribute("data-version");
    var wanted = null; // the newest end heard of that the page does not show yet
    var busy = false;
    var socketOpen = false;

    var behind = 0; // fragments in a row that came back older than the end heard of
    function refresh() {
      if (leaving || busy || wanted === null || String(wanted) === version) return;
      busy = true;
      var target = wanted;
      fetch(window.location.href, {
        credentials: "same-origin", cache: "no-store", headers: { "X-Dashboard-Fragment": "1" }
      }).then(function (r) {
        if (r.status === 401 || r.status === 403 || !r.ok || r.redirected) { window.location.reload(); return; }
        return r.text().then(function (html) {
          section.innerHTML = html;
          // The fragment's own version (a shared count may lag the newest commit a little).
          var inner = section.querySelector("[data-fragment-version]");
          version = inner ? inner.getAttribute("data-fragment-version") : String(target);
          section.setAttribute("data-version", version);
          readSkew(section);
          tick();
        });
      }).catch(function () { /* the server is restarting: the next version or poll tries again */ })
        .then(function () {
          busy = false;
          // A shared count taken before the newest commit is retaken within a second or two:
          // ask again a few times, then wait for the next commit.
          behind = wanted !== null && Number(version) < Number(wanted) ? behind + 1 : 0;
          if (behind > 0 && behind <= 4) setTimeout(refresh, 750);
        });
    }

    function heard(v) {
      if (wanted === null || Number(v) > Number(wanted)) wanted = v;
      refresh();
    }

    function poll() {
      if (socketOpen || document.hidden) return;
      fetch(section.getAttribute("data-live"), { credentials: "same-origin", cache: "no-store" })
        .then(function (r) {
          if (r.status === 401 || r.status === 403) { window.location.reload(); return null; }
          return r.ok ? r.json() : null;
        })
        .then(function (state) { if (state) heard(state.version); })
        .catch(function () { /* try again at the next poll */ });
    }

    function connect() {
      var path = section.getAttribute("data-socket");
      if (!path || !window.WebSocket) return;
      var ws;
      try {
        ws = new WebSocket((window.location.protocol === "https:" ? "wss://" : "ws://") + window.location.host + path);
      } catch (e) { return; }
      ws.onopen = function () { socketOpen = true; section.setAttribute("data-live-mode", "socket"); };
      ws.onmessage = function (e) {
        try { heard(JSON.parse(e.data).version); } catch (err) { /* not ours */ }
      };
      ws.onclose = function (e) {
        socketOpen = false;
        section.setAttribute("data-live-mode", "poll");
        if (e.code === 4401) { window.location.reload(); return; } // signed out elsewhere
        setTimeout(connect, 5000);
      };
    }

    section.setAttribute("data-live-mode", "poll");
    setInterval(poll, POLL_MS);
    connect();
  }

  function start() {
    readSkew(document);
    tick();
    setInterval(tick, 1000);
    var section = document.getElementById("live");
    if (section) live(section);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
