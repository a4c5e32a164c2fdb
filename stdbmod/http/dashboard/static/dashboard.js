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

  // Every form that changes something asks first.
  document.addEventListener("submit", function (e) {
    var msg = e.target.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) e.preventDefault();
  });

  function start() {
    readSkew(document);
    tick();
    setInterval(tick, 1000);
    var live = document.getElementById("live");
    if (!live) return;
    var version = live.getAttribute("data-version");
    var busy = false;
    setInterval(function () {
      if (busy || document.hidden) return;
      busy = true;
      fetch(live.getAttribute("data-live"), { credentials: "same-origin", cache: "no-store" })
        .then(function (r) {
          if (r.status === 401 || r.status === 403) { window.location.reload(); return null; }
          return r.ok ? r.json() : null;
        })
        .then(function (state) {
          if (!state || String(state.version) === version) return null;
          return fetch(window.location.href, {
            credentials: "same-origin", cache: "no-store", headers: { "X-Dashboard-Fragment": "1" }
          }).then(function (r) {
            if (!r.ok || r.redirected) { window.location.reload(); return; }
            return r.text().then(function (html) {
              live.innerHTML = html;
              version = String(state.version);
              live.setAttribute("data-version", version);
              readSkew(live);
              tick();
            });
          });
        })
        .catch(function () { /* the server is restarting: try again at the next poll */ })
        .then(function () { busy = false; });
    }, POLL_MS);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
